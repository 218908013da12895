"""Benchmark-only child: OpenHands' non-LLM condensers over a transcript (runs under the
Python ≥ 3.12 environment of ``make bench-peers``; imports nothing from ctxledger).

Input (a JSON file): ``messages`` — ``[kind, tokens]`` (kind: system, objective, action,
observation, user) for the head and every step, ``steps`` — the message indices of each
step, ``head`` — the indices of the head messages, ``budget``. The history is rebuilt as OpenHands events (system message,
the user's task, then per step a ``CmdRunAction`` and its ``CmdOutputObservation``); before
each step every condenser produces its view, applying its condensation actions as the agent
controller would. Output (one JSON line): per condenser and turn, the indices of the messages
kept (``-1`` for a masked/summarised placeholder) and the seconds the condenser took.
ConversationWindowCondenser only acts on a condensation request, which is issued whenever the
view exceeds the budget (OpenHands does so on a context-window error).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from importlib.metadata import version
from typing import Any

_MAX_REQUESTS = 4


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    action = importlib.import_module("openhands.events.action")
    agent_actions = importlib.import_module("openhands.events.action.agent")
    observation = importlib.import_module("openhands.events.observation")
    event_mod = importlib.import_module("openhands.events.event")
    view_mod = importlib.import_module("openhands.memory.view")
    condenser_mod = importlib.import_module("openhands.memory.condenser.condenser")
    impl = importlib.import_module("openhands.memory.condenser.impl")
    source = event_mod.EventSource

    messages: list[list[Any]] = data["messages"]
    budget = int(data["budget"])

    def make(index: int) -> Any:
        kind = messages[index][0]
        if kind == "system":
            ev = action.SystemMessageAction(content="")
            ev._source = source.AGENT
        elif kind == "action":
            ev = action.CmdRunAction(command="")
            ev._source = source.AGENT
        elif kind in ("objective", "user"):
            ev = action.MessageAction(content="")
            ev._source = source.USER
        else:
            ev = observation.CmdOutputObservation(content="", command="")
            ev._source = source.ENVIRONMENT
        ev._message_index = index
        return ev

    def fresh() -> dict[str, Any]:
        return {
            "recent_events": impl.RecentEventsCondenser(),
            "observation_masking": impl.ObservationMaskingCondenser(),
            "amortized_forgetting": impl.AmortizedForgettingCondenser(),
            "conversation_window": impl.ConversationWindowCondenser(),
        }

    def tokens_of(view: Any) -> int:
        total = 0
        for ev in view.events:
            idx = getattr(ev, "_message_index", None)
            total += messages[idx][1] if idx is not None else len(str(ev.message)) // 4 + 4
        return total

    out: dict[str, list[dict[str, Any]]] = {}
    for name, condenser in fresh().items():
        history: list[Any] = []

        def add(ev: Any, history: list[Any] = history) -> None:
            ev._id = len(history)
            history.append(ev)

        for idx in data["head"]:
            add(make(idx))
        turns: list[dict[str, Any]] = []
        for n in range(len(data["steps"])):
            if n:
                for idx in data["steps"][n - 1]:
                    add(make(idx))
            start = time.perf_counter()
            requests = 0
            while True:
                result = condenser.condense(view_mod.View.from_events(history))
                if isinstance(result, condenser_mod.Condensation):
                    add(result.action)
                    continue
                if (
                    name == "conversation_window"
                    and tokens_of(result) > budget
                    and requests < _MAX_REQUESTS
                ):
                    requests += 1
                    add(agent_actions.CondensationRequestAction())
                    continue
                break
            took = time.perf_counter() - start
            kept = [getattr(ev, "_message_index", -1) for ev in result.events]
            turns.append({"kept": kept, "seconds": took})
        out[name] = turns
    print(json.dumps({"version": version("openhands-ai"), "condensers": out}))


if __name__ == "__main__":
    main(sys.argv[1])
