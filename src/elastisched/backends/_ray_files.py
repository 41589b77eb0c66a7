"""What the Ray backend reads from the shared workdir rather than over Ray: each rank's exit file.

The rank actor (`_ray_worker.py`) writes `jobs/<id>/run/g<gen>-r<rank>.exit` (`"<code> [SIGTERM]"`, the local
backend's format) when its child exits; a stat per rank tells the backend which ranks ended without an RPC to
every actor, and a restarted service settles generations that ended while it was down from the same files.
Stdlib only.
"""

from __future__ import annotations

from pathlib import Path

DIED = -9  # exit code reported for a worker whose actor is gone (killed, or its node lost)


class NodeLeft(RuntimeError):
    """A node of the placement left the Ray cluster during the launch."""


def exit_files(job_dir: Path, gen: int, world: int) -> list[list[str] | None]:
    """Per rank: the exit file's words (an empty file reads as a worker that died), or None while absent."""
    out: list[list[str] | None] = []
    for r in range(world):
        try:
            out.append((job_dir / "run" / f"g{gen}-r{r}.exit").read_text().split() or [str(DIED)])
        except OSError:
            out.append(None)
    return out


def exit_code(rec: list[str]) -> int:
    """The exit file's code (`"0 SIGTERM"` → 0); a garbled file counts as a worker that died."""
    try:
        return int(rec[0])
    except (ValueError, IndexError):
        return DIED
