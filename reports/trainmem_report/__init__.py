"""trainmem's report renderer: results folders (reports/out/<date>-<device>/) -> index.html,
summary.md and PNG plots. Entry point: `python3 -m reports.trainmem_report` (see __main__.py)."""
