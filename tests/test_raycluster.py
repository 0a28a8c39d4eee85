"""What a Ray task ships back to the driver: every file of its directory, but a summary cache."""

from __future__ import annotations

from kvbench.analysis.cache import CACHE_DIR
from kvbench.raycluster import files_of, put_files


def test_a_tasks_files_come_back_without_its_summary_cache(tmp_path):
    src = tmp_path / "task"
    (src / "events").mkdir(parents=True)
    (src / CACHE_DIR).mkdir()
    (src / "run.json").write_text("{}")
    (src / "events" / "part-0.parquet").write_bytes(b"PAR1")
    (src / CACHE_DIR / "per_request-abc.parquet").write_bytes(b"cached")
    assert sorted(files_of(src)) == [".cache/per_request-abc.parquet", "events/part-0.parquet", "run.json"]
    shipped = files_of(src, skip=CACHE_DIR)
    assert shipped == {"events/part-0.parquet": b"PAR1", "run.json": b"{}"}
    put_files(tmp_path / "driver", shipped)
    assert (tmp_path / "driver" / "events" / "part-0.parquet").read_bytes() == b"PAR1"
    assert not (tmp_path / "driver" / CACHE_DIR).exists()
