"""Run folders, the run format's contract: the plan (`plan.json`), the ranks' JSONL records
(stdlib only), shards -> parquet tables, `run.json`, finishing a run and `open_run()`.

May import `machine` (host names, package versions) and the foundations; never torch or
NVML, so a run can be read anywhere."""
