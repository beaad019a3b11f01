// Cortex dashboard: filter table rows as you type. No framework, no build step.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const input of document.querySelectorAll("input.filter[data-table]")) {
    const table = document.getElementById(input.dataset.table);
    if (!table) continue;
    input.addEventListener("input", () => {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const row of table.tBodies[0].rows) {
        const text = row.textContent.toLowerCase();
        row.classList.toggle("filtered-out", !words.every((w) => text.includes(w)));
      }
    });
  }
});
