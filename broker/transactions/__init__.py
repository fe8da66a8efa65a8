"""The transaction coordinator: transactional ids, their producer ids and epochs and the
state of their current transaction, durable in `__transaction_state` on the coordinator runtime."""
