"""Query planning shared by both executors: query validation, signatures and candidate
bits, leaf counts, matching orders, task types and coalesced groups, kept up per batch."""
