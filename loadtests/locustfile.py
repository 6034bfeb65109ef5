"""Locust scenarios (run by loadtests.run_load; loopback only, bounded by --run-time).

ProbeUser:   research traffic, POST /v1/nll with 64 probe-shaped items (2-6 turns + a target).
ChatbotUser: a chatbot's request path, POST /v1/rerank with a 6-turn context and 8 candidates.
Both are closed-loop (no think time): offered load grows with the number of users.
"""

import random

from locust import HttpUser, constant, task

from dialscore_server.checkpoints.standins import templated_sentences

POOL = templated_sentences(3000, seed=7)
CONTEXT = [{"speaker": "user" if k % 2 == 0 else "bot", "text": POOL[k]} for k in range(6)]
CANDIDATES = POOL[100:108]


class ProbeUser(HttpUser):
    wait_time = constant(0)

    @task
    def nll(self):
        rng = random.Random()
        items = [{"context": rng.sample(POOL, rng.randint(2, 6)), "target": rng.choice(POOL)}
                 for _ in range(64)]
        self.client.post("/v1/nll", json={"model": "dialogpt-medium", "items": items}, name="/v1/nll")


class ChatbotUser(HttpUser):
    wait_time = constant(0)

    @task
    def rerank(self):
        self.client.post("/v1/rerank", json={"context": CONTEXT, "candidates": CANDIDATES},
                         name="/v1/rerank")
