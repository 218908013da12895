"""Decision points from the engine (seed 004's DecisionPointBuilder as a build purpose): a
small pack of L0 + L1 only, with its own budget, recorded like any build (re-derivable), and
invisible to the agent's prompt: the next prompt is exactly what it would have been."""

from __future__ import annotations

from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.engine.rederive import rederive
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.projections.audit import audit
from ctxledger.projections.inspector import inspect_agent

AGENT = "primary-1"


def _session(url: str, *, decision_point: bool) -> tuple[ContextEngine, str, str]:
    e = open_engine(url, clock=SteppingClock(), settings=EngineSettings(session_id="s"))
    e.register_agent(AgentIdentity(agent_id=AGENT, role="primary", task="fix", budget=2000))
    e.record(AGENT, "Objective: fix the parser", layer=Layer.L1, source=Source.USER_REQUIREMENT,
             pinned=True, mandatory=True)  # fmt: skip
    e.record(AGENT, "Root cause: unit suffix ignored", layer=Layer.L2, source=Source.WORKER_FINDING)
    e.record(AGENT, "Project convention: run make test", layer=Layer.L3, source=Source.VERIFIED_FACT,
             verified=True)  # fmt: skip
    e.record(AGENT, "$ pytest -q\nFAILED tests/test_sizes.py::test_mb", layer=Layer.L0,
             source=Source.TOOL_LOG, failure=True)  # fmt: skip
    first = e.build(AGENT)
    dp_layers = ""
    if decision_point:
        dp = e.build(AGENT, purpose="decision_point", budget=300)
        dp_layers = ",".join(sorted({str(int(i.layer)) for i in dp.pack.layers.get(Layer.L0, ())}
                                    | {str(int(i.layer)) for i in dp.pack.layers.get(Layer.L1, ())}))  # fmt: skip
        assert set(dp.pack.layers) <= {Layer.L0, Layer.L1}
        assert dp.pack.budget_limit == 300
        assert dp.pack.budget_used <= 300
        reasons = {d.item_id: d.reason for d in dp.pack.decisions if d.action == "dropped"}
        assert sorted(reasons.values()) == ["excluded_by_scope", "excluded_by_scope"]
    e.record(AGENT, "$ cat src/sizes.py\n1: def parse_size(text):", layer=Layer.L0,
             source=Source.TOOL_LOG)  # fmt: skip
    second = e.build(AGENT)
    assert first.generation == second.generation
    return e, second.prompt.text, dp_layers


def test_a_decision_point_is_small_recorded_and_leaves_the_prompt_alone(tmp_path: Path) -> None:
    with_dp, prompt_with, layers = _session(f"sqlite:///{tmp_path / 'a.db'}", decision_point=True)
    without, prompt_without, _ = _session(f"sqlite:///{tmp_path / 'b.db'}", decision_point=False)
    try:
        assert layers == "0,1"
        assert prompt_with == prompt_without  # the agent's prompt never saw the decision point
        records = list(with_dp.ledger.read_all())
        starts = [r.event for r in records if isinstance(r.event, ev.ContextBuildingStarted)]
        assert [s.request.purpose for s in starts if s.request is not None] == [
            "",
            "decision_point",
            "",
        ]
        assert audit((r.position, r.event) for r in records) == []
        report = rederive(records)
        assert (report.builds, report.rederived, report.mismatches) == (3, 3, 0)
        view = inspect_agent(with_dp.states, AGENT, None)
        assert view.decision_points == 1
        assert with_dp.agent(AGENT).current.builds == 2
    finally:
        with_dp.close()
        without.close()
