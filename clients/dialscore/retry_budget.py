"""A retry budget shared by every call of a client (or of several clients): gRPC's retry
throttling (gRFC A6), a token bucket.

The bucket holds at most ``max_tokens`` tokens and starts full. Each failed attempt that would be
retried (a retryable status, a dropped connection) takes one token; each successful response
gives back ``token_ratio``. A retry is allowed only while more than half of ``max_tokens``
remain. So when the service is healthy, retries are free; when most calls fail (a service down,
overloaded, or shedding load), a client stops multiplying its traffic by ``max_attempts`` after
about ``max_tokens / 2`` failures, and recovers as successes come back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class RetryBudget:
    """Token bucket of retries; thread-safe. See the module docstring."""

    max_tokens: float = 10.0
    token_ratio: float = 0.1
    tokens: float = field(default=-1.0)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or not 0 < self.token_ratio <= self.max_tokens:
            raise ValueError("max_tokens must be > 0 and token_ratio in (0, max_tokens]")
        if self.tokens < 0:
            self.tokens = self.max_tokens

    def on_failure(self) -> bool:
        """Record a failed attempt; whether a retry is allowed now."""
        with self._lock:
            self.tokens = max(0.0, self.tokens - 1.0)
            return self.tokens > self.max_tokens / 2

    def on_success(self) -> None:
        """Record a successful (or at least non-retryable) response."""
        with self._lock:
            self.tokens = min(self.max_tokens, self.tokens + self.token_ratio)

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self.tokens <= self.max_tokens / 2
