"""The window is learned from the provider, never ratcheted: any sequence of context-limit
errors that state their limit leaves the agent's budget cap at that limit less the stated
output reserve (never below what pinned and mandatory content needs), whatever came before;
an explicit budget or a successful turn above the cap clears it; all folded from events."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import replay_states
from ctxledger.domain.errors import RefreshExhaustedError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.refresh_policy import learned_window
from ctxledger.projections.catalog import read_models

AGENT = "a"
BUDGET = 8000


def _error(prompt: int, output: int, limit: int) -> dict[str, object]:
    if output:
        message = (
            f"input length and `max_tokens` exceed context limit: {prompt} + {output} > {limit}"
        )
    else:
        message = f"prompt is too long: {prompt} tokens > {limit} maximum"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


errors = st.lists(
    st.tuples(
        st.integers(min_value=20_000, max_value=400_000),  # the provider's count of the prompt
        st.sampled_from([0, 0, 4096, 21_333]),  # the stated output reserve
        st.integers(min_value=5_000, max_value=200_000),  # the stated limit
        st.sampled_from(["error", "error", "success", "budget"]),  # what follows
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40)
@given(errors)
def test_stated_limits_never_ratchet_the_window(sequence: list[tuple[int, int, int, str]]) -> None:
    engine = open_engine(
        open_ledger("memory://"), clock=SteppingClock(), settings=EngineSettings(session_id="s")
    )
    engine.register_agent(AgentIdentity(agent_id=AGENT, role="primary", budget=BUDGET))
    objective = engine.record(
        AGENT, "Objective: fix the parser", layer=Layer.L1, source=Source.USER_REQUIREMENT,
        pinned=True, mandatory=True,
    )  # fmt: skip
    engine.record(AGENT, "tool output\n" * 50)
    engine.build(AGENT)
    for prompt, output, limit, then in sequence:
        # the ladder is bounded; the window it learned still stands when it gives up
        with contextlib.suppress(RefreshExhaustedError):
            engine.on_turn_error(AGENT, _error(prompt, output, limit))
        ag = engine.agent(AGENT)
        # our prompt is far smaller than the provider's count (ratio < 0.5): no scaling
        assert ag.window == max(objective.token_count, limit - output, 1)
        assert ag.window >= limit - output
        if then == "success":
            sent = ag.window + 1
            engine.report_usage(AGENT, {"input_tokens": sent, "output_tokens": 1})
            assert engine.agent(AGENT).window == 0  # a turn larger than the cap went through
        elif then == "budget":
            engine.configure(AGENT, budget=BUDGET + 1 + engine.agent(AGENT).settings.budget)
            assert engine.agent(AGENT).window == 0  # an explicit budget clears the cap
        engine.turn_succeeded(AGENT)  # ends the refresh count (a no-op after usage)
        # the next build gets min(budget, window) — never a cap below the stated window
        request_budget = engine.build(AGENT).pack.budget_limit
        ag = engine.agent(AGENT)
        want = ag.settings.budget or BUDGET
        assert request_budget == (min(want, ag.window) if ag.window else want)
    # all folded from events: a replay gives the same window
    states, _, _ = replay_states(engine.ledger)
    folded = read_models(states).generations.by_agent[AGENT]
    assert folded.window == engine.agent(AGENT).window


def test_learned_window_values() -> None:
    # stated limit and output reserve: limit − reserve, the same at every attempt
    assert [learned_window(9_000, 8_000, n, prompt_tokens=210_000, limit_tokens=200_000,
                           output_tokens=21_333) for n in (1, 2, 3)] == [178_667] * 3  # fmt: skip
    # our count plausibly the same prompt (ratio 0.8): scaled into our tokens
    assert learned_window(8_000, 8_000, 1, prompt_tokens=10_000, limit_tokens=9_000) == 7_200
    # never below the floor (what pinned and mandatory content needs)
    assert learned_window(500, 500, 1, prompt_tokens=900, limit_tokens=100, floor=300) == 300
    # no stated limit: shrinks from the prompt that failed (0.7 per attempt)
    assert learned_window(1_000, 0, 1) == 700
    assert learned_window(1_000, 700, 2) == 343
