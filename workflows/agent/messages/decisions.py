"""What a human sends a run, and what the run keeps of it: the bodies of ``approve`` /
``reject`` / ``modify`` / ``guide`` (small JSON objects, so ``temporal workflow signal --input
'{...}'`` works), the ``decide`` update's input, and a call waiting for a decision.

Every body may say who sent it (``decided_by``): ``treadle approve --as NAME``, by default the OS
user and host. It is attribution, not authentication: the name is what the sender wrote, and
who may signal a workflow at all is the Temporal server's authorizer's job. A run that names its
``approvers`` refuses a decision from any other name. Optional, so old bodies stay valid.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from treadle.workflows.base import Frozen

MAX_HUMAN_TEXT_CHARS = 4_000
"""A rejection reason or guidance is sent to the model on every later step: longer is refused."""
MAX_CALL_ID_CHARS = 200
MAX_NAME_CHARS = 200

MAX_MODIFY_ARGUMENTS_BYTES = 256 * 1024
"""New arguments from a human (``modify``) travel in history: larger bodies are refused."""


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
"""Who decided (``decided_by``), or whom a run takes decisions from (``approvers``)."""


class ApprovalDecision(enum.StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    MODIFIED = "modified"


class PendingApproval(Frozen):
    """A tool call waiting for a human. ``arguments`` is the parsed, schema-valid argument set."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    step: int
    requested_at: datetime
    decision: ApprovalDecision | None = None
    reason: str | None = None
    decided_by: str | None = None
    """Who decided, as the decision said (absent from decisions that named no one)."""


class ApproveSignal(Frozen):
    """``{"call_id": "..."}``; ``call_id`` may be left out when exactly one call is pending."""

    call_id: str | None = Field(None, max_length=MAX_CALL_ID_CHARS)
    decided_by: Name | None = None


class RejectSignal(Frozen):
    """``{"call_id": "...", "reason": "..."}``; the reason is the model's next observation."""

    call_id: str | None = Field(None, max_length=MAX_CALL_ID_CHARS)
    reason: str = Field(min_length=1, max_length=MAX_HUMAN_TEXT_CHARS)
    decided_by: Name | None = None


class ModifySignal(Frozen):
    """``{"call_id": "...", "arguments": {...}}``; arguments must pass the tool's schema."""

    call_id: str | None = Field(None, max_length=MAX_CALL_ID_CHARS)
    arguments: dict[str, Any]
    decided_by: Name | None = None


class GuideSignal(Frozen):
    """``{"guidance": "..."}`` to continue a stuck run with advice for the model, or
    ``{"halt": true, "reason": "..."}`` to stop it. With ``"call_id"``, it is for the stuck
    sub-agent that call started (``call_1``; a grandchild ``call_1/call_2``): the run sends it
    on (``delegation.forward_guidance``)."""

    guidance: str | None = Field(None, min_length=1, max_length=MAX_HUMAN_TEXT_CHARS)
    halt: bool = False
    reason: str | None = Field(None, max_length=MAX_HUMAN_TEXT_CHARS)
    decided_by: Name | None = None
    call_id: str | None = Field(None, min_length=1, max_length=MAX_CALL_ID_CHARS)

    @model_validator(mode="after")
    def _one_choice(self) -> GuideSignal:
        if self.halt == (self.guidance is not None):
            raise ValueError("give either guidance (to continue) or halt: true")
        return self


class Decision(Frozen):
    """Input of the ``decide`` update: one signal body plus which action it is."""

    action: Literal["approve", "reject", "modify", "guide"]
    call_id: str | None = None
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    guidance: str | None = None
    halt: bool | None = None
    decided_by: Name | None = None

    def body(self) -> dict[str, Any]:
        """The equivalent signal body, so both doors share one set of checks."""
        return self.model_dump(exclude={"action"}, exclude_none=True)
