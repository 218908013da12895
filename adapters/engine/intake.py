"""Intake: registering and configuring agents, recording items and steering notes, promoting a
finding into a context pool, and the secret screening of items (redaction, and the ids derived
again from redacted content)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import EngineCore, serialized
from ctxledger.adapters.ledger import stream_id_for
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import check_budget, validate_settings
from ctxledger.domain.codec import check_struct
from ctxledger.domain.controls_policy import decide_promote_finding
from ctxledger.domain.errors import InvalidInputError, SecretRefusedError
from ctxledger.domain.free_text import map_item
from ctxledger.domain.input_checks import member
from ctxledger.domain.intake_policy import decide_configure, decide_register
from ctxledger.domain.model import (
    AgentIdentity,
    Durability,
    Item,
    Layer,
    Source,
    content_hash,
    item_id_for,
)
from ctxledger.domain.request import Scope
from ctxledger.domain.settings import AgentSettings, SecretPolicy
from ctxledger.projections.pool import check_recordable

__all__ = ["Intake"]


class Intake(EngineCore):
    """Agents, their settings, and what is recorded into their pools."""

    @checked
    @serialized
    def register_agent(
        self, identity: AgentIdentity, settings: AgentSettings | None = None
    ) -> None:
        """Record an agent identity once, with its settings; re-registering the same identity
        is a no-op (use ``configure`` to change settings)."""
        check_struct(identity, "agent identity")
        if settings is not None:
            check_struct(settings, "agent settings")
        if not identity.agent_id or len(identity.agent_id) > 200:
            raise InvalidInputError("agent_id must be 1–200 characters")
        if not identity.session_id:
            identity = msgspec.structs.replace(identity, session_id=self.settings.session_id)
        check_budget(identity.budget)
        chosen = validate_settings(settings or AgentSettings(watermark=self.settings.watermark))
        agent_id = identity.agent_id

        def decide(_version: int) -> list[ev.Event]:
            existing = self.runner.generations.by_agent.get(agent_id)
            return decide_register(
                existing.agent if existing is not None else None,
                identity,
                chosen,
                now=self._now,
            )

        self.decide_and_append(stream_id_for(identity.session_id, agent_id), decide)

    @checked
    @serialized
    def configure(
        self,
        agent_id: str,
        *,
        strategy: str | None = None,
        budget: int | None = None,
        scope: Scope | None = None,
        recall: bool | None = None,
        watermark: float | None = None,
        latest_step: bool | None = None,
        secrets: SecretPolicy | None = None,
        by: str = "",
    ) -> AgentSettings:
        """Change the agent's settings (recorded as ``AgentConfigured``); every later build,
        refresh and rebuild uses them. A new scope takes effect at the next generation."""
        if scope is not None:
            check_struct(scope, "scope")
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("strategy", strategy),
                ("budget", budget),
                ("scope", scope),
                ("recall", recall),
                ("watermark", watermark),
                ("latest_step", latest_step),
                ("secrets", secrets),
            )
            if v is not None
        }
        self.agent(agent_id)
        events = self._append_agent(
            agent_id,
            lambda: decide_configure(
                agent_id, self.agent(agent_id).settings, changes, now=self._now, by=by
            ),
        )
        if not events:  # nothing changed: the settings decided on (nothing folded since)
            return self.agent(agent_id).settings
        configured = events[-1]
        assert isinstance(configured, ev.AgentConfigured)
        return configured.settings

    # --- items ----------------------------------------------------------------------------------

    def _screened(self, agent_id: str, items: Sequence[Item]) -> list[Item]:
        """The items as the agent's secrets policy lets them be recorded: every credential in
        the item's free text (``domain.free_text.map_item``: content, task, stage, phase, tool
        signature, files, symbols) and its id replaced by a typed marker and the kinds
        noted in ``redacted`` (``redact``; an id derived from the content, or holding a
        credential itself, is derived again from the redacted content),
        ``SecretRefusedError`` before anything is written (``refuse``), or as given
        (``allow``)."""
        policy = self.agent(agent_id).settings.secrets
        if policy == "allow":
            return list(items)
        screened: list[Item] = []
        for item in items:
            kinds: list[str] = []

            def screen(_item_id: str, text: str, kinds: list[str] = kinds) -> str:
                redacted, found = self._redact(text)
                kinds.extend(found)
                return redacted

            changed = map_item(item, screen)
            _, id_kinds = self._redact(item.id)
            found = tuple(dict.fromkeys([*kinds, *id_kinds]))
            if not found:
                screened.append(item)
                continue
            if policy == "refuse":
                raise SecretRefusedError(agent_id, found)
            redacted = msgspec.structs.replace(
                changed,
                id=self._redacted_id(item, changed.content, holds_secret=bool(id_kinds)),
                redacted=tuple(dict.fromkeys(item.redacted + found)),
            )
            screened.append(self._sized(redacted) if changed != item else redacted)
        return screened

    def _redacted_id(self, item: Item, content: str, *, holds_secret: bool) -> str:
        """The id of *item* once its content is redacted: a content-addressed id (this engine's
        or an importer's ``kind.<hash prefix>``) is derived from the redacted content, so the
        id cannot confirm a guessed secret; an id that itself holds a credential is replaced;
        any other caller id is kept."""
        if holds_secret or item.id == item_id_for(item.layer, item.source, item.content):
            return item_id_for(item.layer, item.source, content)
        before, after = content_hash(item.content), content_hash(content)
        for n in (64, 32, 24, 16, 12):
            if before[:n] in item.id:
                return item.id.replace(before[:n], after[:n])
        return item.id

    @serialized
    def make_item(
        self,
        agent_id: str,
        content: str,
        *,
        layer: Layer = Layer.L0,
        source: Source = Source.TOOL_LOG,
        item_id: str = "",
        **provenance: Any,
    ) -> Item:
        """An Item with a content-addressed id (unless given) and its token count."""
        if not isinstance(content, str):
            raise InvalidInputError("item content must be text")
        layer = member(Layer, layer, "layer")
        source = member(Source, source, "source")
        iid = item_id or item_id_for(layer, source, content)
        try:
            item = Item(
                id=iid,
                layer=layer,
                source=source,
                content=content,
                agent=agent_id,
                observed_at=provenance.pop("observed_at", None) or self._now(),
                **provenance,
            )
            return self._sized(item)
        except TypeError as exc:
            raise InvalidInputError(f"bad item field: {exc}") from None

    @checked
    @serialized
    def record(self, agent_id: str, item: Item | str, **kwargs: Any) -> Item:
        """Record an observation into the agent's pool (text or a ready Item)."""
        self.agent(agent_id)
        if isinstance(item, Item):
            it = check_struct(item, "item")
        else:
            it = self.make_item(agent_id, item, **kwargs)
        if it.token_count == 0 and it.content:
            it = self._sized(it)
        [it] = self._screened(agent_id, [it])
        check_recordable(it)
        self._append_agent(
            agent_id, lambda: [ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=it)]
        )
        return it

    @checked
    @serialized
    def record_many(self, agent_id: str, items: Sequence[Item]) -> list[Item]:
        """Record several items in one append (all or none); returns them as recorded (ids and
        content redacted by the agent's secrets policy)."""
        self.agent(agent_id)
        for i in items:
            check_struct(i, "item")
        ready = [i if i.token_count or not i.content else self._sized(i) for i in items]
        ready = self._screened(agent_id, ready)
        for i in ready:
            check_recordable(i)
        self._append_agent(
            agent_id,
            lambda: [ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=i) for i in ready],
        )
        return ready

    @checked
    @serialized
    def promote_finding(self, agent_id: str, item_id: str, *, to: str = "", by: str = "") -> Item:
        """Promote one finding of *agent_id*'s pool into the context pool of *to* (default: the
        agent's parent, or the agent itself when it has none) as a structured finding
        (``domain.controls_policy.promoted_finding``), screened by the target's secrets
        policy: ``ItemRecorded`` and ``FindingPromoted`` on the target's stream. Verification
        is kept, never granted. Returns the new pool item."""
        target = to or self.agent(agent_id).agent.parent or agent_id
        self.agent(target)
        events = self._append_agent(
            target,
            lambda: decide_promote_finding(
                agent_id,
                item_id,
                self._pool_item(agent_id, item_id),
                to_agent=target,
                promoted=self.pool(target).promoted,
                now=self._now,
                by=by,
                sized=lambda item: self._screened(target, [self._sized(item)])[0],
            ),
        )
        recorded = events[0]
        assert isinstance(recorded, ev.ItemRecorded)
        return recorded.item

    @checked
    @serialized
    def add_steering_note(self, agent_id: str, text: str, *, stage: str = "") -> Item:
        """User guidance: pinned, session-stable, never dropped."""
        self.agent(agent_id)
        item = self.make_item(
            agent_id,
            text,
            layer=Layer.L1,
            source=Source.STEERING_NOTE,
            pinned=True,
            stage=stage,
            durability=Durability.DURABLE,
            observed_at=None,
        )
        [item] = self._screened(agent_id, [item])
        self._append_agent(
            agent_id, lambda: [ev.SteeringNoteAdded(at=self._now(), agent_id=agent_id, item=item)]
        )
        return item
