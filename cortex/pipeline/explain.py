"""Explain a recorded decision: removals, contributions, the margin and counterfactuals.

Pure functions over a :class:`cortex.decision.Decision`, so the API, ``cortex-manage
explain`` and the dashboard give the same answer. Nothing is reverse-engineered: the
decision holds, per step, the filters' removals with their reasons and the weighers'
multiplier and raw value per host, and the final weight of every host that passed the
filters. The caller's own term of the final weight (:func:`cortex.decision.final_weights`)
is the final weight minus the weighers' scaled values.

Vocabulary: the *winner* is the first host answered, the *runner-up* the second
judged host; the *margin* is the winner's final weight minus the runner-up's; the
term (the caller's weight or one weigher) whose difference between the two is the
largest in the winner's favour *decided* it. A *counterfactual* re-ranks the judged
hosts with one weigher's scaled values taken out, with the engine's tie-break
(higher caller weight, then the caller's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cortex.decision import Decision, StepResult

#: Name of the caller's own term in contributions and margins.
CALLER = "caller"
# Final weights are sums of floats; differences below this are ties.
_EPSILON = 1e-9


def explain(decision: Decision) -> dict[str, Any]:
    """The explanation document of one decision (JSON-ready dict).

    A decision without a ranking (a call rejected before its pipeline ran) gives an
    explanation that says so. Keys: ``decision`` (identity), ``summary`` (one line),
    ``removed``/``would_remove`` (``[{host, step, reason}]``), ``steps`` (one line per
    step), ``weighing`` (the pipeline's, :data:`cortex.decision.WEIGHINGS`), ``weighers``
    (``[{step, multiplier}]``), ``ranking`` (per judged host: rank,
    final, caller weight and term, and per weigher raw and scaled), ``winner``,
    ``runner_up``, ``margin``, ``decided_by``, ``differences`` and ``counterfactuals``.
    """
    weighers = decision.weighers
    scaled = {s.name: s.scaled for s in weighers}
    ranking = _ranking(decision, weighers, scaled)
    winner, runner_up = (ranking + [None, None])[:2]
    explanation: dict[str, Any] = {
        "decision": _identity(decision),
        "candidates": len(decision.hosts),
        "result": list(decision.result or ()),
        "caller_first": decision.caller_first(),
        "first_choice": decision.first_choice(),
        "unknown_hosts": list(decision.unknown_hosts),
        "removed": _removals(decision.steps, shadow=False),
        "would_remove": _removals(decision.steps, shadow=True),
        "steps": [_step_line(s) for s in decision.steps],
        "weighing": decision.weighing,
        "weighers": [{"step": s.name, "multiplier": s.factor} for s in weighers],
        "ranking": ranking,
        "winner": winner["host"] if winner else None,
        "runner_up": runner_up["host"] if runner_up else None,
        "margin": None, "decided_by": None, "differences": [],
        "counterfactuals": counterfactuals(decision, scaled),
    }
    if winner and runner_up:
        explanation.update(_margin(winner, runner_up))
    explanation["summary"] = summary(explanation)
    return explanation


def _identity(decision: Decision) -> dict[str, Any]:
    """The fields that say which call this was."""
    return {"id": decision.id,
            "created_at": decision.created_at.isoformat() if decision.created_at else None,
            "service": decision.service, "pipeline": decision.pipeline,
            "intent": decision.intent, "resource_id": decision.resource_id,
            "request_id": decision.request_id,
            "global_request_id": decision.global_request_id, "outcome": decision.outcome,
            "status": decision.status, "detail": decision.detail,
            "knowledge_version": decision.knowledge_version,
            "duration_ms": decision.duration_ms}


def _removals(steps: Sequence[StepResult], shadow: bool) -> list[dict[str, str]]:
    """``[{host, step, reason}]`` of the filters (shadow ones or the others), in step order."""
    return [{"host": host, "step": step.name, "reason": reason}
            for step in steps if step.kind == "filter" and step.shadow == shadow
            for host, reason in step.removed.items()]


def _step_line(step: StepResult) -> dict[str, Any]:
    """One step in a line: name, kind, status, why skipped, hosts in and removed."""
    line = {"step": step.name, "kind": step.kind, "status": step.status,
            "hosts_in": step.hosts_in, "duration_ms": step.duration_ms}
    if step.kind == "filter":
        line["removed"] = len(step.removed)
        line["shadow"] = step.shadow
    else:
        line["multiplier"] = step.factor
    if step.reason:
        line["reason"] = step.reason
    return line


def _ranking(decision: Decision, weighers: Sequence[StepResult],
             scaled: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """The judged hosts in answered order with every term of their final weight."""
    finals, weights = decision.final_weights, decision.weights
    raw = {s.name: s.raw for s in weighers}
    rows: list[dict[str, Any]] = []
    for host in decision.result or ():
        if host not in finals:
            continue  # an unknown host kept after the judged ones
        terms = {s.name: scaled[s.name].get(host, 0.0) for s in weighers}
        rows.append({
            "host": host, "rank": len(rows) + 1, "final": finals[host],
            "caller": {"weight": weights.get(host),
                       "term": finals[host] - sum(terms.values())},
            "weighers": {s.name: {"raw": raw[s.name].get(host), "scaled": terms[s.name]}
                         for s in weighers}})
    return rows


def _terms(row: Mapping[str, Any]) -> dict[str, float]:
    """``{term: value}`` of one ranking row: the caller's term and each weigher's."""
    terms = {CALLER: row["caller"]["term"]}
    terms.update({name: w["scaled"] for name, w in row["weighers"].items()})
    return terms


def _margin(winner: Mapping[str, Any], runner_up: Mapping[str, Any]) -> dict[str, Any]:
    """Margin, per-term differences and the deciding term between the first two hosts.

    With a zero margin the engine's tie-break decided: the caller's weight, else the
    caller's order (``decided_by.term`` is then ``tie-break``).
    """
    ahead, behind = _terms(winner), _terms(runner_up)
    differences: list[dict[str, Any]] = [
        {"term": t, "winner": ahead[t], "runner_up": behind[t], "difference": ahead[t] - behind[t]}
        for t in ahead]
    margin = winner["final"] - runner_up["final"]
    if abs(margin) < _EPSILON:
        a, b = winner["caller"]["weight"] or 0.0, runner_up["caller"]["weight"] or 0.0
        how = "higher caller weight" if a > b else "earlier in the caller's order"
        decided: dict[str, Any] = {"term": "tie-break", "difference": 0.0, "how": how}
    else:
        best = max(differences, key=lambda d: d["difference"])
        decided = {"term": best["term"], "difference": best["difference"],
                   "decisive": best["difference"] > margin + _EPSILON}
    return {"margin": margin, "differences": differences, "decided_by": decided}


def rerank(decision: Decision, without: Mapping[str, float] | None = None) -> list[str]:
    """The judged hosts re-ranked with one weigher's scaled values ``without`` taken out.

    ``without``: ``{host: scaled value}`` of the weigher left out (None: as it is). Uses
    the engine's order: final weight descending, then caller weight descending, then
    the caller's order. Adjusted weights are rounded to 1e-9 so that float noise from
    subtracting a term does not decide what is really a tie.
    """
    finals, weights = decision.final_weights, decision.weights
    order = {h: i for i, h in enumerate(decision.hosts)}
    without = without or {}
    adjusted = {h: round(f - without.get(h, 0.0), 9) for h, f in finals.items()}
    return sorted(adjusted, key=lambda h: (-adjusted[h], -weights.get(h, 0.0),
                                           order.get(h, len(order))))


def counterfactuals(decision: Decision, scaled: Mapping[str, Mapping[str, float]] | None = None
                    ) -> list[dict[str, Any]]:
    """Per weigher that ran: who would be first without it, and whether that changes.

    ``[{without, first, changed, top}]`` where ``top`` is the first three hosts of the
    re-ranking. Empty when fewer than two hosts were judged. ``scaled``: each weigher's
    ``{host: scaled value}`` when already at hand.
    """
    if scaled is None:
        scaled = {s.name: s.scaled for s in decision.weighers}
    actual = [h for h in decision.result or () if h in decision.final_weights]
    if len(actual) < 2:
        return []
    found = []
    for name, values in scaled.items():
        ranked = rerank(decision, values)
        found.append({"without": name, "first": ranked[0],
                      "changed": ranked[0] != actual[0], "top": ranked[:3]})
    return found


def summary(explanation: Mapping[str, Any]) -> str:
    """One sentence: what was answered, what decided it, or why there is no answer."""
    identity = explanation["decision"]
    result = explanation["result"]
    if identity.get("status") not in (None, 200):
        return (f"no ranking: the call was answered {identity.get('status')} "
                f"({identity.get('detail') or 'no detail'}); the caller kept its own order")
    if not result:
        return (f"no valid host: filters removed all {explanation['candidates']} "
                "candidates")
    text = f"{result[0]} first of {len(result)} answered ({explanation['candidates']} offered)"
    decided = explanation.get("decided_by")
    if decided and decided["term"] == "tie-break":
        text += f"; tied with {explanation['runner_up']}, {decided['how']}"
    elif decided:
        text += (f"; {_term_name(decided['term'])} decided it over "
                 f"{explanation['runner_up']} (margin {explanation['margin']:.4f})")
    return text


def _term_name(term: str) -> str:
    """How a term is named in sentences."""
    return "the caller's weight" if term == CALLER else term


def render_text(explanation: Mapping[str, Any], max_hosts: int = 10,
                max_removed: int = 50) -> str:
    """The explanation as readable text (``cortex-manage explain``).

    At most ``max_hosts`` ranked hosts and ``max_removed`` removals are listed; the
    rest is counted (the JSON form has everything).
    """
    lines = _header(explanation)
    lines += _removed_lines(explanation, max_removed)
    lines += _ranking_lines(explanation, max_hosts)
    lines += _margin_lines(explanation)
    return "\n".join(lines) + "\n"


def _header(explanation: Mapping[str, Any]) -> list[str]:
    """Who asked what, and the one-line summary."""
    d = explanation["decision"]
    lines = [f"Decision {d['id']} ({d.get('service')}, {d.get('intent') or 'unknown intent'}, "
             f"pipeline {d.get('pipeline') or 'none'}) at {d.get('created_at')}",
             f"  resource {d.get('resource_id') or '-'}, request {d.get('request_id') or '-'}, "
             f"outcome {d.get('outcome')}, knowledge version {d.get('knowledge_version')}",
             f"  {explanation['summary']}"]
    first = explanation.get("caller_first")
    if explanation.get("first_choice") and first:
        lines.append(f"  the caller's first choice {first} was {explanation['first_choice']}")
    if explanation["unknown_hosts"]:
        lines.append(f"  {len(explanation['unknown_hosts'])} hosts unknown to Cortex: "
                     f"{_some(explanation['unknown_hosts'], 5)}")
    return lines


def _removed_lines(explanation: Mapping[str, Any], limit: int) -> list[str]:
    """Removals (and shadow would-be removals) with their reasons; skipped steps."""
    lines = []
    for key, title in (("removed", "Removed by filters"),
                       ("would_remove", "Shadow filters would remove (nothing removed)")):
        rows = explanation[key]
        if not rows:
            continue
        lines += ["", f"{title}:"]
        width = max(len(r["host"]) for r in rows[:limit])
        lines += [f"  {r['host']:<{width}}  {r['step']}: {r['reason']}" for r in rows[:limit]]
        if len(rows) > limit:
            lines.append(f"  ... and {len(rows) - limit} more")
    skipped: dict[tuple[str, str], list[str]] = {}
    for s in explanation["steps"]:
        if s["status"] != "ran":
            skipped.setdefault((s["status"], s.get("reason") or ""), []).append(s["step"])
    if skipped:
        lines += ["", "Steps not applied:"]
        lines += [f"  {status}, {reason}: {', '.join(names)}"
                  for (status, reason), names in skipped.items()]
    return lines


def _ranking_lines(explanation: Mapping[str, Any], limit: int) -> list[str]:
    """The ranking table: final weight, caller term, each weigher's scaled (raw) value."""
    ranking = explanation["ranking"]
    if not ranking:
        return []
    weighers = explanation["weighers"]
    lines = ["", "Weighers (scaled = multiplier * tanh(raw)):"
             if explanation.get("weighing", "cortex") == "cortex" else
             "Weighers, as Nova weighs (scaled = multiplier * raw normalised between the "
             "judged hosts' least and greatest; the caller's weight not counted):"]
    lines += [f"  w{i + 1} = {w['step']} (multiplier {w['multiplier']:g})"
              for i, w in enumerate(weighers)]
    if not weighers:
        lines.append("  none ran: the caller's order by weight stands")
    header = ["#", "host", "final", "caller"] + [f"w{i + 1}" for i in range(len(weighers))]
    rows = [header]
    for row in ranking[:limit]:
        cells = [str(row["rank"]), row["host"], f"{row['final']:+.4f}",
                 f"{row['caller']['term']:+.4f}"]
        for w in weighers:
            value = row["weighers"][w["step"]]
            raw = "-" if value["raw"] is None else f"{value['raw']:.3g}"
            cells.append(f"{value['scaled']:+.4f} ({raw})")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["", "Ranking, best first (scaled contribution, raw value in parentheses):"]
    lines += ["  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
              for r in rows]
    if len(ranking) > limit:
        lines.append(f"  ... and {len(ranking) - limit} more judged hosts")
    return lines


def _margin_lines(explanation: Mapping[str, Any]) -> list[str]:
    """Winner against runner-up, term by term, and the counterfactuals."""
    lines = []
    if explanation["margin"] is not None:
        lines += ["", f"Why {explanation['winner']} and not {explanation['runner_up']}: "
                      f"margin {explanation['margin']:+.4f}"]
        for d in sorted(explanation["differences"], key=lambda d: -d["difference"]):
            lines.append(f"  {_term_name(d['term'])}: {d['winner']:+.4f} vs "
                         f"{d['runner_up']:+.4f} ({d['difference']:+.4f})")
        decided = explanation["decided_by"]
        if decided["term"] == "tie-break":
            lines.append(f"  a tie, broken by the engine: {decided['how']}")
        else:
            lines.append(f"  decided by {_term_name(decided['term'])}"
                         + (" (without it the runner-up would be ahead)"
                            if decided["decisive"] else ""))
    if explanation["counterfactuals"]:
        lines += ["", "Counterfactuals:"]
    for c in explanation["counterfactuals"]:
        outcome = "would have been first" if c["changed"] else "would still be first"
        lines.append(f"  without {c['without']}, {c['first']} {outcome}")
    return lines


def _some(items: Sequence[str], n: int) -> str:
    """The first ``n`` items, comma-separated, with a count of the rest."""
    text = ", ".join(items[:n])
    return text + (f" (+{len(items) - n} more)" if len(items) > n else "")
