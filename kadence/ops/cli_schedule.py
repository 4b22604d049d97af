"""`kadence schedule create|describe|list|update|toggle|trigger|backfill|delete`: schedules from the
shell, as `temporal schedule ...` (docs/decisions/0004-schedules-in-the-history-service.md), each
command a call of the client's (`create_schedule`, `ScheduleHandle`, `list_schedules`).

Durations are Go's, as Temporal's CLI takes them (`90s`, `15m`, `1h30m`); an interval may carry an
offset (`1h/15m`); times are RFC 3339 (`2026-05-01T09:00:00Z`). `describe --json` and `list --json`
print the client's ScheduleDescription and ScheduleListDescription field for field, durations as
Go durations, times as RFC 3339 UTC and overlap policies as the option takes them.

Exit codes as `kadence workflow`'s: 0 done; 1 the command was refused or found nothing (the message
says why); 2 bad usage (a malformed option, or a spec that cannot act).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from kadence.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleListDescription,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from kadence.client._schedule_types import schedule_record
from kadence.converter import DataConverter
from kadence.exceptions import CommandRejectedError, KadenceError
from kadence.ops.cli_workflow import _arguments, _echo, _memo, _run, input_option, json_option
from kadence.protocol import zones
from kadence.protocol.cron import go_duration_ms
from kadence.protocol.schedule_spec import CALENDAR_FIELDS, spec_problem

# The --overlap-policy values, Temporal's CLI's names.
OVERLAP_POLICIES: dict[str, ScheduleOverlapPolicy] = {
    "Skip": ScheduleOverlapPolicy.SKIP, "BufferOne": ScheduleOverlapPolicy.BUFFER_ONE,
    "BufferAll": ScheduleOverlapPolicy.BUFFER_ALL, "CancelOther": ScheduleOverlapPolicy.CANCEL_OTHER,
    "TerminateOther": ScheduleOverlapPolicy.TERMINATE_OTHER, "AllowAll": ScheduleOverlapPolicy.ALLOW_ALL,
}
OVERLAP_NAMES = {policy: name for name, policy in OVERLAP_POLICIES.items()}
NO_REASON = "(no reason provided)"  # toggle's note without --reason, as Temporal's CLI


# ---- option types


def parse_duration(text: str) -> timedelta:
    """A Go duration (`90s`, `1h30m`, `1.5h`, `250ms`; `0`), in cron's `@every` grammar."""
    return timedelta(milliseconds=go_duration_ms(text))


def go_duration(duration: timedelta) -> str:
    """`duration` as a Go duration that parse_duration reads back (`1h30m`, `1m30s`, `250ms`)."""
    ms = round(duration.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    parts = [f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (seconds, "s"), (ms, "ms")) if value]
    return sign + "".join(parts)


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Interval(click.ParamType):
    """EVERY or EVERY/OFFSET: the nominal times epoch + offset + k × every."""

    name = "interval"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> ScheduleIntervalSpec:
        if isinstance(value, ScheduleIntervalSpec):
            return value
        every, slash, offset = str(value).partition("/")
        try:
            return ScheduleIntervalSpec(parse_duration(every), parse_duration(offset) if slash else None)
        except ValueError as exc:
            self.fail(f"{exc}: an interval is a duration, optionally with /offset (90s, 1h, 1h/15m)", param, ctx)


class Timestamp(click.ParamType):
    name = "timestamp"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            at = datetime.fromisoformat(str(value))
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            self.fail(f"{value!r} is not an RFC 3339 time with its offset, such as 2026-05-01T09:00:00Z or "
                      "2026-05-01T11:00:00+02:00", param, ctx)
        return at


class Calendar(click.ParamType):
    """A ScheduleCalendarSpec as JSON: each field (second, minute, hour, day_of_month, month, year,
    day_of_week) a number, a range {"start", "end", "step"} or a list of them; a field left out
    takes ScheduleCalendarSpec's default (second, minute and hour 0; every day, month and year)."""

    name = "calendar"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> ScheduleCalendarSpec:
        if isinstance(value, ScheduleCalendarSpec):
            return value
        example = '{"hour": 9, "minute": 30, "day_of_week": {"start": 1, "end": 5}}'
        try:
            fields = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"a calendar is a JSON object such as {example}: {exc}", param, ctx)
        if not isinstance(fields, dict):
            self.fail(f"a calendar is a JSON object such as {example}, not {value!r}", param, ctx)
        unknown = set(fields) - {*CALENDAR_FIELDS, "comment"}
        if unknown:
            self.fail(f"a calendar has no field {', '.join(sorted(unknown))}; its fields are {', '.join(CALENDAR_FIELDS)} "
                      "and comment", param, ctx)
        given: dict[str, Any] = {}
        for name, ranges in fields.items():
            if name == "comment":
                given[name] = str(ranges)
                continue
            try:
                given[name] = tuple(_range(item) for item in (ranges if isinstance(ranges, list) else [ranges]))
            except (TypeError, ValueError):
                self.fail(f"the calendar's {name} takes a number, a range such as {{\"start\": 1, \"end\": 5, \"step\": 1}}, "
                          f"or a list of them; not {json.dumps(ranges)}", param, ctx)
        return ScheduleCalendarSpec(**given)


def _range(item: Any) -> ScheduleRange:
    if isinstance(item, bool):
        raise TypeError(item)
    if isinstance(item, int):
        return ScheduleRange(item)
    if isinstance(item, dict) and set(item) <= {"start", "end", "step"} and "start" in item \
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item.values()):
        return ScheduleRange(item["start"], item.get("end", 0), item.get("step", 0))
    raise ValueError(item)


def _zone(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value:
        try:
            zones.time_zone(value)
        except zones.UnknownTimeZone as exc:
            raise click.BadParameter(str(exc), ctx, param) from exc
    return value


DURATION, INTERVAL, TIMESTAMP, CALENDAR = Duration(), Interval(), Timestamp(), Calendar()
schedule_id_option = click.option("--schedule-id", "-s", required=True, help="The schedule's id.")


def _overlap_option(default: str | None, help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--overlap-policy", type=click.Choice(list(OVERLAP_POLICIES), case_sensitive=False), default=default,
                        show_default=default is not None, metavar=f"[{'|'.join(OVERLAP_POLICIES)}]", help=help)


overlap_option = _overlap_option(None, "What the actions do while a run the schedule started still runs (default: the schedule's policy).")


def _overlap(name: str | None) -> ScheduleOverlapPolicy | None:
    """The policy a --overlap-policy names (click's case-insensitive Choice hands back the listed spelling)."""
    return None if name is None else OVERLAP_POLICIES[name]


def _definition_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """What create and update take: the whole schedule."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        schedule_id_option,
        click.option("--workflow-id", "-w", required=True, help="The id of the workflows it starts; each gets the action's "
                     "nominal time appended (`<id>-2026-05-01T09:00:00Z`)."),
        click.option("--type", "-t", "workflow_type", required=True, help="The workflow type (its name)."),
        click.option("--task-queue", "-q", required=True, help="The task queue its workers poll."),
        input_option,
        click.option("--interval", "intervals", type=INTERVAL, multiple=True,
                     help="Act every DURATION, optionally at an /OFFSET into it (90s, 1h, 1h/15m); repeat for more."),
        click.option("--cron", "crons", multiple=True, help="A cron string (`0 9 * * 1-5`, `@hourly`, `@every 90s`); repeat for more."),
        click.option("--calendar", "calendars", type=CALENDAR, multiple=True,
                     help='A calendar as JSON (`{"hour": 9, "minute": 30, "day_of_week": {"start": 1, "end": 5}}`); repeat for more.'),
        click.option("--start-time", type=TIMESTAMP, default=None, help="Act from this time on (RFC 3339)."),
        click.option("--end-time", type=TIMESTAMP, default=None, help="Act no more after this time (RFC 3339)."),
        click.option("--jitter", type=DURATION, default=None,
                     help="Delay each action by up to this long (a hash of the time, not random)."),
        click.option("--time-zone", default=None, callback=_zone,
                     help="The IANA zone calendars and cron strings are read in (default UTC)."),
        _overlap_option("Skip", "What an action does while a run the schedule started still runs."),
        click.option("--catchup-window", type=DURATION, default=None,
                     help="How late a missed action may still be taken (default a year; at least 10s)."),
        click.option("--pause-on-failure", is_flag=True, help="Pause the schedule when a run it started fails or times out."),
        click.option("--notes", default=None, help="A note on the schedule's state (why it is paused)."),
        click.option("--paused", is_flag=True, help="Create it paused (update: leave it paused)."),
        click.option("--remaining-actions", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Take this many actions, then no more (0: no limit)."),
        click.option("--execution-timeout", type=DURATION, default=None, help="Each workflow's execution timeout."),
        click.option("--run-timeout", type=DURATION, default=None, help="Each workflow's run timeout."),
        click.option("--task-timeout", type=DURATION, default=None, help="Each workflow's workflow task timeout."),
        click.option("--memo", "memo_pairs", multiple=True, help="A memo entry of each workflow as KEY=JSON; repeat for more."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _schedule(
    workflow_id: str, workflow_type: str, task_queue: str, inputs: tuple[str, ...], intervals: tuple[ScheduleIntervalSpec, ...],
    crons: tuple[str, ...], calendars: tuple[ScheduleCalendarSpec, ...], start_time: datetime | None, end_time: datetime | None,
    jitter: timedelta | None, time_zone: str | None, overlap_policy: str, catchup_window: timedelta | None, pause_on_failure: bool,
    notes: str | None, paused: bool, remaining_actions: int, execution_timeout: timedelta | None, run_timeout: timedelta | None,
    task_timeout: timedelta | None, memo_pairs: tuple[str, ...],
) -> Schedule:
    """The schedule the options describe; a spec that cannot act is bad usage, found before connecting."""
    if not (intervals or crons or calendars):
        raise click.UsageError("give the schedule a time: --interval, --cron or --calendar")
    policy = SchedulePolicy(overlap=OVERLAP_POLICIES[overlap_policy], pause_on_failure=pause_on_failure)
    if catchup_window is not None:
        policy.catchup_window = catchup_window
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            workflow_type, arg_list=_arguments(inputs), id=workflow_id, task_queue=task_queue, execution_timeout=execution_timeout,
            run_timeout=run_timeout, task_timeout=task_timeout, memo=_memo(memo_pairs),
        ),
        spec=ScheduleSpec(calendars=calendars, intervals=intervals, cron_expressions=crons, start_at=start_time, end_at=end_time,
                          jitter=jitter, time_zone_name=time_zone),
        policy=policy,
        state=ScheduleState(note=notes, paused=paused, limited_actions=remaining_actions > 0, remaining_actions=remaining_actions),
    )
    problem = spec_problem(schedule_record(schedule, DataConverter.default.payload_converter)["spec"])
    if problem:
        raise click.UsageError(f"the schedule's spec cannot act: {problem}")
    return schedule


def _run_on(schedule_id: str, main: Callable[[Client], Any]) -> Any:
    """`main` with a client (cli_workflow's `_run`), a refusal said of the schedule rather than of its key."""
    async def refusals_named(client: Client) -> Any:
        try:
            return await main(client)
        except ScheduleAlreadyRunningError as exc:
            raise KadenceError(f"schedule {schedule_id!r} already exists (`kadence schedule update` changes it)") from exc
        except CommandRejectedError as exc:
            raise KadenceError(f"schedule {schedule_id!r}: {exc.reason}") from exc

    return _run(refusals_named)


# ---- JSON and text


def to_json(value: Any) -> Any:
    """The client's schedule types as JSON: field for field, durations and times as the options take them."""
    if isinstance(value, ScheduleOverlapPolicy):
        return OVERLAP_NAMES[value]
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return go_duration(value)
    if isinstance(value, ScheduleActionStartWorkflow):
        return to_json({
            "workflow": value.workflow, "args": value.args, "id": value.id, "task_queue": value.task_queue,
            "execution_timeout": value.execution_timeout, "run_timeout": value.run_timeout, "task_timeout": value.task_timeout,
            "memo": value.memo, "search_attributes": value.search_attributes,
        })
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    return value


def _ranges_text(ranges: Sequence[ScheduleRange]) -> str:
    if not ranges:
        return "*"
    return ",".join(
        str(r.start) + (f"-{r.end}" if r.end > r.start else "") + (f"/{r.step}" if r.step > 1 else "") for r in ranges
    )


def spec_text(spec: ScheduleSpec) -> str:
    """The spec in a line: `every 1h/15m; cron 0 9 * * 1-5; calendar ...; from ... until ...`."""
    parts = [f"every {go_duration(i.every)}" + (f"/{go_duration(i.offset)}" if i.offset else "") for i in spec.intervals]
    parts += [f"cron {expression}" for expression in spec.cron_expressions]
    parts += ["calendar " + " ".join(f"{name}={_ranges_text(getattr(c, name))}" for name in CALENDAR_FIELDS) for c in spec.calendars]
    if spec.skip:
        parts.append(f"{len(spec.skip)} skip calendars")
    if spec.start_at:
        parts.append(f"from {rfc3339(spec.start_at)}")
    if spec.end_at:
        parts.append(f"until {rfc3339(spec.end_at)}")
    if spec.jitter:
        parts.append(f"jitter {go_duration(spec.jitter)}")
    if spec.time_zone_name:
        parts.append(f"in {spec.time_zone_name}")
    return "; ".join(parts)


def describe_text(described: ScheduleDescription) -> str:
    schedule, info = described.schedule, described.info
    action, policy, state = schedule.action, schedule.policy, schedule.state
    lines = [
        f"schedule_id: {described.id}",
        f"action: start {action.workflow} on {action.task_queue} as {action.id}-<nominal time>, input {json.dumps(list(action.args))}",
        f"spec: {spec_text(schedule.spec)}",
        f"policy: overlap {OVERLAP_NAMES[policy.overlap]}, catch-up window {go_duration(policy.catchup_window)}"
        + (", pause on failure" if policy.pause_on_failure else ""),
        f"state: {'paused' if state.paused else 'active'}" + (f" ({state.note})" if state.note else "")
        + (f", {state.remaining_actions} actions left" if state.limited_actions else ""),
        f"actions: {info.num_actions} taken, {info.num_actions_skipped_overlap} skipped by the overlap policy, "
        f"{info.num_actions_missed_catchup_window} missed past the catch-up window",
        f"created: {rfc3339(info.created_at)}" + (f", updated {rfc3339(info.last_updated_at)}" if info.last_updated_at else ""),
        "running:" + "".join(f"\n  {r.workflow_id} run {r.first_execution_run_id or '(starting)'}" for r in info.running_actions),
        "recent actions:" + "".join(f"\n  {rfc3339(a.scheduled_at)} {a.action.workflow_id} {a.status}" for a in info.recent_actions),
        "next action times:" + "".join(f"\n  {rfc3339(at)}" for at in info.next_action_times),
    ]
    return "\n".join(lines)


# ---- the commands


@click.group("schedule")
def schedule_group() -> None:
    """Schedules: workflows started at the times a spec names (as `temporal schedule`)."""


@schedule_group.command("create")
@_definition_options
@json_option
def create(schedule_id: str, as_json: bool, **options: Any) -> None:
    """Create a schedule; from then on it starts the workflow at the times its spec names."""
    schedule = _schedule(**options)
    _run_on(schedule_id, lambda c: c.create_schedule(schedule_id, schedule))
    _echo({"schedule_id": schedule_id, "created": True}, as_json, f"created schedule {schedule_id}")


@schedule_group.command("update")
@_definition_options
@json_option
def update(schedule_id: str, as_json: bool, **options: Any) -> None:
    """Replace the schedule's definition with what the options give (an option left out takes its
    default, as `temporal schedule update`: --paused to keep it paused)."""
    schedule = _schedule(**options)

    def replaced(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=schedule)

    _run_on(schedule_id, lambda c: c.get_schedule_handle(schedule_id).update(replaced))
    _echo({"schedule_id": schedule_id, "updated": True}, as_json, f"updated schedule {schedule_id}")


@schedule_group.command("describe")
@schedule_id_option
@json_option
def describe(schedule_id: str, as_json: bool) -> None:
    """The schedule: its definition, the actions it took and is running, and its next action times."""
    described: ScheduleDescription = _run_on(schedule_id, lambda c: c.get_schedule_handle(schedule_id).describe())
    if as_json:
        click.echo(json.dumps(to_json(described), default=str))
        return
    click.echo(describe_text(described))


@schedule_group.command("list")
@json_option
def list_schedules(as_json: bool) -> None:
    """Every schedule, by id: its workflow type, whether it is paused, its next action and its last."""
    async def main(client: Client) -> list[ScheduleListDescription]:
        return [schedule async for schedule in await client.list_schedules()]

    schedules: list[ScheduleListDescription] = _run(main)
    if as_json:
        click.echo(json.dumps(to_json(schedules), default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in ("schedule_id", "workflow_type", "paused", "notes", "next_action", "last_action"):
        table.add_column(column, overflow="fold")
    for listed in schedules:
        state = listed.schedule.state
        recent, upcoming = listed.info.recent_actions, listed.info.next_action_times
        table.add_row(
            listed.id, listed.schedule.action.workflow, "yes" if state.paused else "no", state.note or "",
            rfc3339(upcoming[0]) if upcoming else "", f"{rfc3339(recent[-1].scheduled_at)} {recent[-1].status}" if recent else "",
        )
    Console().print(table)


@schedule_group.command("toggle")
@schedule_id_option
@click.option("--pause", is_flag=True, help="Pause the schedule: it takes no action until unpaused.")
@click.option("--unpause", is_flag=True, help="Unpause it: it acts again from the next time its spec names.")
@click.option("--reason", default=NO_REASON, show_default=True, help="Why: kept as the schedule's note.")
@json_option
def toggle(schedule_id: str, pause: bool, unpause: bool, reason: str, as_json: bool) -> None:
    """Pause or unpause the schedule."""
    if pause == unpause:
        raise click.UsageError("give one of --pause and --unpause")
    handle_call = (lambda c: c.get_schedule_handle(schedule_id).pause(note=reason)) if pause \
        else (lambda c: c.get_schedule_handle(schedule_id).unpause(note=reason))
    _run_on(schedule_id, handle_call)
    _echo({"schedule_id": schedule_id, "paused": pause}, as_json, f"{'paused' if pause else 'unpaused'} schedule {schedule_id}")


@schedule_group.command("trigger")
@schedule_id_option
@overlap_option
@json_option
def trigger(schedule_id: str, overlap_policy: str | None, as_json: bool) -> None:
    """Take an action now, whatever the spec (paused or not)."""
    _run_on(schedule_id, lambda c: c.get_schedule_handle(schedule_id).trigger(overlap=_overlap(overlap_policy)))
    _echo({"schedule_id": schedule_id, "triggered": True}, as_json, f"triggered schedule {schedule_id}")


@schedule_group.command("backfill")
@schedule_id_option
@click.option("--start-time", type=TIMESTAMP, required=True, help="The range's start (RFC 3339).")
@click.option("--end-time", type=TIMESTAMP, required=True, help="The range's end (RFC 3339), included.")
@overlap_option
@json_option
def backfill(schedule_id: str, start_time: datetime, end_time: datetime, overlap_policy: str | None, as_json: bool) -> None:
    """Take now the actions the spec names from --start-time to --end-time, whatever the catch-up
    window (BufferAll or AllowAll take every one; Skip skips those that come while one runs)."""
    if end_time < start_time:
        raise click.BadParameter("it comes before --start-time", param_hint="--end-time")
    filled = ScheduleBackfill(start_at=start_time, end_at=end_time, overlap=_overlap(overlap_policy))
    _run_on(schedule_id, lambda c: c.get_schedule_handle(schedule_id).backfill(filled))
    _echo({"schedule_id": schedule_id, "backfilled": [rfc3339(start_time), rfc3339(end_time)]}, as_json,
          f"backfilled schedule {schedule_id} from {rfc3339(start_time)} to {rfc3339(end_time)}")


@schedule_group.command("delete")
@schedule_id_option
@json_option
def delete(schedule_id: str, as_json: bool) -> None:
    """Delete the schedule; the runs it started go on."""
    _run_on(schedule_id, lambda c: c.get_schedule_handle(schedule_id).delete())
    _echo({"schedule_id": schedule_id, "deleted": True}, as_json, f"deleted schedule {schedule_id}")
