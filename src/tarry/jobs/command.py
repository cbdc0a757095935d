"""``tarry worker``: the embedded worker as a command, stopped cleanly by SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tarry.agents import Agent
from tarry.jobs.worker import Worker
from tarry.specs import SpecError, load_spec
from tarry.store import Store


def load_agents(specs: Sequence[str]) -> list[Agent]:
    """The agents named by ``module:attribute`` specs: an Agent, a list of them, or a function returning either."""
    found: list[Agent] = []
    for spec in specs:
        value = load_spec(spec, "--agents")
        if callable(value) and not isinstance(value, Agent):
            value = value()
        items = [value] if isinstance(value, Agent) else list(value) if isinstance(value, list | tuple) else [value]
        for item in items:
            if not isinstance(item, Agent):
                raise SpecError(f"--agents {spec} holds {item!r}, not an Agent (or a list of agents)")
        found.extend(items)
    return found


async def run_worker(
    url: str | None,
    agents: Sequence[Agent],
    *,
    concurrency: int = 16,
    lease: float = 60.0,
    check_batch: int = 256,
    ready: bool = True,
) -> int:
    """Run a worker for ``agents`` until SIGTERM or SIGINT; returns the exit status."""
    async with Store(url, lease=lease) as store:
        worker = Worker(store, list(agents), concurrency=concurrency, check_batch=check_batch)
        if ready:
            names = ", ".join(agent.name for agent in agents)
            print(f"tarry worker: carrying on chats of {names} in {store.url}", flush=True)
        await worker.run(handle_signals=True)
    print(f"tarry worker: stopped after {worker.steps} step(s) and {worker.checks} batched check(s)", flush=True)
    return 0


def main(url: str | None, agents: Sequence[Agent], concurrency: int, lease: float, check_batch: int = 256) -> int:
    """The ``tarry worker`` command, for the agents its ``--agents`` specs named (``load_agents``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(run_worker(url, agents, concurrency=concurrency, lease=lease, check_batch=check_batch))
