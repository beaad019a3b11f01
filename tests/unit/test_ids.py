"""Ids drawn in forked processes differ (gunicorn forks its workers after importing Cortex)."""

from __future__ import annotations

import multiprocessing

from cortex import ids


def draw(queue) -> None:
    queue.put([ids.new_uuid() for _ in range(3)])


def test_forked_workers_draw_different_ids():
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=draw, args=(queue,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    drawn = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    parent = [ids.new_uuid() for _ in range(3)]
    assert len({*drawn[0], *drawn[1], *parent}) == 9
