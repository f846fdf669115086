"""Webhooks of decision rules: where a delivery may go (targets.py), how it is signed
(signing.py), its stored record and retry schedule (deliveries.py) and the sender that makes
the requests (sender.py). docs/design/webhooks.md has the rules and why."""
