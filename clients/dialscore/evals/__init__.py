"""Dialogue evaluations: data readers, metrics and transforms that run without a server, the
scorers that ask the service, and the runners that tie them together.

    mutual           MuTual / MuTual-plus: readers, option ranking, R@1 / R@2 / MRR, official export
    decode           DECODE: reader, contradiction-service wire types, metrics, A2T and RCT sets
    robustness       the ADEM-style robustness battery's perturbations
    robustness_items the responses the battery perturbs, read from MuTual or DECODE
    robustness_stats the battery's per-variant statistics
    linguistic       the battery's POS / entity / synonym backend (textblob, WordNet 3.0, lemminflect)
    robustness_plot  the battery's figure (matplotlib)
    served           the served models: lookup by name and kind, with hints
    scorers          the Scorer protocol and the nll, contradiction and rerank scorers (HTTP)
    runners/         one runner per evaluation (`dialscore eval mutual|decode|robustness`)

Nothing here imports Ray or torch; httpx is imported only when a scorer or runner runs.
"""
