"""What a backend reports of the jobs it knows: `JobSummary`, returned by `Client.list_jobs()`."""

from __future__ import annotations

from dataclasses import dataclass

from fray_ray.fray.types import JobStatus


@dataclass(frozen=True)
class JobSummary:
    """One job as the cluster reports it (every user's and session's, not only this client's)."""

    job_id: str
    """The backend's id (an Iris job id: `/user/name[/child...]`)."""
    status: JobStatus
    parent_job: str | None = None
    """The job it is a child of, or None for a root job."""
    error: str = ""
    """Why it failed, or why it is still pending; empty otherwise."""
    submitted_at: float | None = None
    """Wall-clock seconds since the epoch, when the backend knows them."""
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        if not self.job_id:
            raise ValueError("a JobSummary needs a job_id")
