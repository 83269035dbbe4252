"""`fray-ray jobs`: every job with its full id, as aligned text or as JSON.

The text table never cuts a cell to the terminal's width (ids are what users copy into
`fray-ray logs` and `fray-ray stop`), and an error keeps only its first line there; `--json`
has everything.
"""

from __future__ import annotations

from typing import Any

from fray_ray.iris.types import JobInfoSnapshot

HEADER = ("JOB", "STATE", "TASKS", "FAILURES", "ERROR")


def job_record(job: JobInfoSnapshot) -> dict[str, Any]:
    """One job as JSON: ids, state, task counts, failures and why it failed or waits."""
    return {
        "job_id": job.job_id,
        "parent_job_id": job.parent_job_id or None,
        "state": job.state.name.lower(),
        "task_count": job.task_count,
        "completed_count": job.completed_count,
        "task_state_counts": dict(job.task_state_counts),
        "failure_count": job.failure_count,
        "preemption_count": job.preemption_count,
        "exit_code": job.exit_code,
        "error": job.error or None,
        "pending_reason": job.pending_reason or None,
    }


def render_table(jobs: list[JobInfoSnapshot]) -> str:
    """Columns padded to their widest cell, full ids, one line per job."""
    rows = [HEADER] + [
        (
            job.job_id,
            job.state.name.lower(),
            f"{job.completed_count}/{job.task_count}",
            str(job.failure_count),
            (job.error or job.pending_reason).strip().splitlines()[0] if (job.error or job.pending_reason).strip() else "",
        )
        for job in jobs
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(HEADER) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths)) + ("  " + row[-1] if row[-1] else "")
        for row in rows
    ).rstrip() if jobs else "no jobs"
