"""APScheduler 3 wiring: one job per enabled agent, plus the heartbeat.

Each agent job runs on a one-thread executor of its own (no agent waits for another's
thread; an agent added while the daemon runs gets one too), and has ``max_instances=1``
(an agent never trains twice at once), ``coalesce=True`` (runs missed while busy or
asleep collapse into one), a real ``misfire_grace_time`` and a jittered trigger. The
heartbeat runs on its own executor so that long training jobs cannot starve it; a stale
heartbeat means the scheduler itself is stuck, which is what ``/healthz`` and the
systemd watchdog report.

>>> scheduler = AgentScheduler(settings, run_job, on_heartbeat)  # doctest: +SKIP
>>> scheduler.start(settings, plugins)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from apscheduler.util import undefined

from genesis_fp16.config.plugins import LoadedPlugin
from genesis_fp16.config.settings import Settings, parse_schedule
from genesis_fp16.service.state_lock import record_scheduled

HEARTBEAT_JOB = "heartbeat"
JOB_PREFIX = "train:"


def build_trigger(schedule: str, jitter: float) -> IntervalTrigger | CronTrigger:
    """The trigger for a schedule string: seconds between runs, or a 5-field cron line."""
    kind, value = parse_schedule(schedule)
    jitter_seconds = round(jitter) or None
    if kind == "interval":
        return IntervalTrigger(seconds=float(value), jitter=jitter_seconds, timezone=UTC)
    # from_crontab() takes no jitter, so the five fields go to the constructor.
    names = ("minute", "hour", "day", "month", "day_of_week")
    fields = dict(zip(names, str(value).split(), strict=True))
    return CronTrigger(**fields, jitter=jitter_seconds, timezone=UTC)


class AgentScheduler:
    """Owns the BackgroundScheduler; add, change and remove agent jobs from settings. The
    state folder's lock file (``owner_fd``, genesis_fp16/service/state_lock.py) names the
    agents it schedules after each change, and that it stops once :meth:`pause` ran."""

    def __init__(
        self,
        settings: Settings,
        run_job: Callable[[str, LoadedPlugin], None],
        on_heartbeat: Callable[[], None],
        on_skip: Callable[[str], None] | None = None,
        owner_fd: int | None = None,
    ) -> None:
        self._owner_fd = owner_fd
        self._stopping = False
        self._run_job = run_job
        self._on_skip = on_skip
        self._scheduler = BackgroundScheduler(
            executors={HEARTBEAT_JOB: ThreadPoolExecutor(max_workers=1)},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": int(settings.misfire_grace_seconds),
            },
            timezone=UTC,
        )
        self._scheduler.add_job(
            on_heartbeat,
            IntervalTrigger(seconds=settings.heartbeat_seconds, timezone=UTC),
            id=HEARTBEAT_JOB,
            executor=HEARTBEAT_JOB,
            next_run_time=datetime.now(UTC),
        )
        self._executors: set[str] = set()
        # A due job whose previous run still trains is skipped by APScheduler: count it.
        self._scheduler.add_listener(self._skipped, EVENT_JOB_MAX_INSTANCES)

    def _skipped(self, event: JobSubmissionEvent) -> None:
        if self._on_skip is not None and event.job_id.startswith(JOB_PREFIX):
            self._on_skip(event.job_id[len(JOB_PREFIX) :])

    def start(self, settings: Settings, plugins: Mapping[str, LoadedPlugin]) -> None:
        """Start the scheduler with a job per enabled agent; the first runs at once if asked."""
        self._scheduler.start()
        self.sync(settings, plugins, first=settings.run_at_start)

    def sync(
        self, settings: Settings, plugins: Mapping[str, LoadedPlugin], first: bool = False
    ) -> list[str]:
        """Make the jobs match ``settings`` and the loaded ``plugins`` (installed or
        uninstalled while the daemon runs); returns what changed, for the log. ``first``: a
        job created now runs at once."""
        changes = []
        for agent in sorted(set(self.scheduled_agents()) - set(plugins)):
            # A run in progress goes on in its thread; only the schedule is removed.
            self._scheduler.remove_job(JOB_PREFIX + agent)
            changes.append(f"{agent}: unscheduled (uninstalled)")
        for agent, plugin in plugins.items():
            job_id = JOB_PREFIX + agent
            job = self._scheduler.get_job(job_id)
            config = settings.agent(agent)
            if not config.own.enabled:
                if job is not None:
                    job.remove()
                    changes.append(f"{agent}: disabled")
                continue
            trigger = build_trigger(config.schedule, settings.schedule_jitter_seconds)
            if job is None:
                self._scheduler.add_job(
                    self._run_job,
                    trigger,
                    args=(agent, plugin),
                    id=job_id,
                    name=agent,
                    executor=self._executor(agent),
                    next_run_time=datetime.now(UTC) if first else undefined,
                )
                changes.append(f"{agent}: scheduled every {config.schedule}")
            elif str(job.trigger) != str(trigger):  # its interval or cron fields (not jitter)
                job.reschedule(trigger)
                changes.append(f"{agent}: rescheduled to {config.schedule}")
        self._record()
        return changes

    def _record(self) -> None:
        if self._owner_fd is not None:  # a later rescan's sync says it stops too
            record_scheduled(self._owner_fd, self.scheduled_agents(), self._stopping)

    def _executor(self, agent: str) -> str:
        """The agent's own one-thread executor, created with its first job (kept if the
        agent is uninstalled: a reinstall reuses it; threads start only when used)."""
        alias = JOB_PREFIX + agent
        if alias not in self._executors:
            self._scheduler.add_executor(ThreadPoolExecutor(max_workers=1), alias)
            self._executors.add(alias)
        return alias

    def scheduled_agents(self) -> list[str]:
        """The agents with a job: loaded and enabled."""
        return sorted(self.next_run_times())

    def next_run_times(self) -> dict[str, float | None]:
        """Each agent job's next run (Unix time; None: paused), for the status page."""
        return {
            job.id[len(JOB_PREFIX) :]: job.next_run_time.timestamp() if job.next_run_time else None
            for job in self._scheduler.get_jobs()
            if job.id.startswith(JOB_PREFIX)
        }

    def run_now(self, agent: str) -> bool:
        """Bring ``agent``'s next run forward to now (the scheduler wakes at once; an
        interval schedule counts on from this run). False: the agent has no job."""
        job = self._scheduler.get_job(JOB_PREFIX + agent)
        if job is None:
            return False
        job.modify(next_run_time=datetime.now(UTC))
        return True

    def pause(self) -> None:
        """Start no new jobs (the heartbeat keeps going), and say in the lock file that the
        daemon stops."""
        self._stopping = True
        for job in self._scheduler.get_jobs():
            if job.id.startswith(JOB_PREFIX):
                job.pause()
        self._record()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
