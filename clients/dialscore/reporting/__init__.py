"""The reporting kit that the probe report and every evaluation report share.

    atomic      the one atomic file writer (temporary file beside the target, fsync, rename,
                fsync of the folder, mode 0644, stale temporaries of a killed run removed)
    rows        rows as CSV, JSON and JSON Lines (through the atomic writer); values made JSON-able
    resume_store the one resume store of probe runs and evaluations: JSON Lines rows keyed by
                a stable id, durable appends (one write, fsync, torn lines ended), invalid and
                stale rows counted, only the missing ids sent again
    run_lock    one run per output folder (an exclusive lock held for the run)
    tables      the one plain-text table renderer
    envelope    the run envelope: configuration, data checksum, served models' provenance,
                timings, files written and client version, the head of every report.json
    progress    progress bars when tqdm (the `reports` extra) is installed, silence otherwise
    plots       PNG figures when matplotlib (the `reports` extra) is installed
    html_page   one self-contained HTML page (styles, script, rows as JSON, plots inline)
    page_assets the page's stylesheet and script (report.css, report.js), inlined by html_page
    html_runs   report.html of a run folder, built from the files its runs wrote

Nothing here imports numpy, matplotlib or tqdm at module level.
"""
