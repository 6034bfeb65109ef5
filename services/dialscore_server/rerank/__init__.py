"""Candidate-reply reranking by self-contradiction (and optionally NLL): the Ray-free engine
(`engine`) and the HTTP schemas of POST /v1/rerank and the TEI-shaped POST /rerank (`protocol`)."""
