"""Evaluations that run without Ray or a server: data readers, metrics and transforms.

    mutual        MuTual / MuTual-plus: readers, option ranking, R@1 / R@2 / MRR, official export
    decode        DECODE: reader, contradiction-service wire types, metrics, A2T and RCT sets
    robustness    the ADEM-style perturbation battery and per-variant statistics
    linguistic    the battery's POS / entity / synonym backend (textblob + WordNet 3.0 files)

The HTTP runners (`dialscore eval mutual|decode|robustness`) are built on these functions; nothing
here imports Ray, httpx or torch.
"""
