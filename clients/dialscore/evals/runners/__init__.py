"""The evaluation runners: MuTual, DECODE and the robustness battery, against a running service.

Each runner reads a data file, scores it through the async HTTP client (a
:class:`~dialscore.evals.scorers.Scorer`, or the contradiction detector for DECODE), computes the
metrics with the pure functions of :mod:`dialscore.evals` and writes its report into `out_dir`,
every file atomically (:mod:`dialscore.reporting`). Every run resumes from its store in `out_dir`
and holds the folder's lock while it runs. The file names carry the evaluation and a tag
(the scorer and model), so runs of several scorers can share one folder:

    mutual      mutual-TAG.ranked.txt       the official export: id, then the letters best first
                mutual-TAG.csv / .json      one row per instance: gold, ranking, gold rank, scores
                mutual-STORE.scores.jsonl   the resume store (one row per scoring job)
    decode      decode.csv / .json          one row per (set, dialogue): gold and each mode's answer
                decode-metrics.csv / .json  one row per (set, mode): every DECODE metric
                decode-a2t.jsonl, decode-rct.jsonl   the diagnostic sets generated (when any)
                decode-MODE-MODEL.detections.jsonl   the resume store (one row per dialogue)
    decode-human-bot  decode-human-bot-MODE.predictions.jsonl   the resume store (one row per utterance)
                decode-human-bot-MODE.csv / .json       one row per utterance: bot, human?, mark,
                                                        annotators (who agreed: the summed
                                                        verifier counts), the prediction
                decode-human-bot-MODE-bots.csv / .json  per bot: n, mean score, marked rate, kept
                decode-human-bot-MODE.png               mean score vs marked rate per bot (matplotlib)
    robustness  robustness-TAG.csv / .json            one row per (response, variant)
                robustness-STORE.scores.jsonl         the resume store (one row per response)
                robustness-TAG-variants.csv / .json   the statistics of each variant
                robustness-TAG.png                    mean score per variant (+- 1 SD), share beating
                                                      the original (when matplotlib is installed)
    every one   NAME.report.json   the run envelope (:mod:`dialscore.reporting.envelope`:
                                   configuration, data checksum, the served models' provenance,
                                   timings, files, client version), then the metrics
                NAME.txt           the terminal table (also passed to `echo`)

Scores are "higher = better" everywhere (:mod:`dialscore.evals.scorers`): the reranker's score as
is, NLLs negated, and for the contradiction scorer 1 - P(contradiction).

Modules, one per evaluation, each with its coroutine taking an `AsyncDialscoreClient` and its sync
twin taking a `DialscoreClient` or a URL:

    mutual      arun_mutual, run_mutual, MUTUAL_SCORERS
    decode      arun_decode, run_decode, DECODE_MODES, DIAGNOSTICS
    decode_human_bot  arun_decode_human_bot
    score_store       DurableScorer: any Scorer with its scores kept (mutual, robustness)
    detection_store   DurableDetection: /v1/contradiction answers kept (decode)

Every store is a :class:`~dialscore.reporting.resume_store.ResumeStore`, as a probe run's is.
    robustness  arun_robustness, run_robustness, ROBUSTNESS_SCORERS
    selection   first: the records a runner keeps (`limit`), refusing an empty set
"""
