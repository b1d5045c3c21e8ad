"""Nexora's side of the loop: what a stuck run does (Recovering) and how phases move
(``start_phase`` and PhaseTransition). Functions of ``AgentRun``; the caller passes
``workflow.now()``, and every write to the memory is still checked by its ownership rules."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.catalogue import StartPhaseArgs
from treadle.workflows.agent.messages.models import ToolCall, ToolOutcome, Turn
from treadle.workflows.agent.messages.state_machine import Event, State
from treadle.workflows.agent.parts.state import AgentRun


def recover(run: AgentRun) -> Event:
    """Recovering: hint the model, ask a human, or halt, per ``config.recovery``."""
    m, config = run.memory, run.input.config
    reason = run.recovery.stuck_reason or "stuck"
    if config.recovery == "ask_human":
        m.pending_guidance = reason
        return Event.HUMAN_GUIDANCE_REQUIRED
    if config.recovery == "halt" or run.recovery.hints_given >= config.max_hints:
        m.error = f"halted: {reason}"
        if config.recovery == "hint":
            m.error += f" (still stuck after {config.max_hints} hint(s))"
        workflow.logger.warning("agent.halted", extra={"reason": m.error})
        return Event.HALT
    run.recovery.hints_given += 1
    note = (
        f"You appear to be stuck: {reason}. That approach is not working. Stop repeating it "
        "and try something different (read the file again, change the plan, or explain "
        f"what blocks you). Hint {run.recovery.hints_given} of {config.max_hints}."
    )
    m.history = (*m.history, Turn(step=m.step, note=note))
    run.tracker.reset_after_recovery()
    run.recovery.stuck_reason = None
    return Event.RECOVERED


def start_phase_call(
    run: AgentRun, call: ToolCall, args: StartPhaseArgs, now: datetime
) -> ToolOutcome:
    """The ``start_phase`` tool changes only the run's own state: no activity needed."""
    current = run.tracker.summary(now, run.started_at).current_phase or 0
    if run.flags.pending_phase is not None:
        error = "ERROR: only one start_phase call per step"
    elif args.number is not None and args.number <= current:
        error = f"ERROR: phase {args.number} is not after the current phase {current}"
    else:
        run.flags.pending_phase = args
        number = args.number or current + 1
        return ToolOutcome.of(call, f"phase {number} started", success=True)
    return ToolOutcome.of(call, error, success=False)


def phase_transition(run: AgentRun, now: datetime) -> Event:
    """PhaseTransition: complete the current phase, start the next, reset tracking."""
    args, run.flags.pending_phase = run.flags.pending_phase, None
    if args is None:  # only a start_phase call leads here
        raise ApplicationError("PhaseTransition without a phase to start", type="InvalidTransition")
    current = run.tracker.summary(now, run.started_at).current_phase
    number = args.number or (current or 0) + 1
    finished = run.tracker.start_phase(number, args.description, now, total=args.total_phases)
    if finished is not None:
        run.record(
            State.PHASE_TRANSITION,
            "PhaseCompleted",
            f"phase {finished.number}: {len(finished.files_changed)} files, "
            f"{finished.tests_passed} tests passed, {len(finished.blockers)} blockers, "
            f"{finished.duration_seconds:.0f}s",
            now,
        )
        workflow.logger.info("agent.phase.completed", extra=finished.model_dump(mode="json"))
    run.record(State.PHASE_TRANSITION, "PhaseStarted", f"phase {number}: {args.description}", now)
    return Event.FILES_CHANGED if run.flags.last_step_mutated else Event.PHASE_STARTED
