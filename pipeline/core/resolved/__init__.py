"""Resolved times from beside the stream: Debezium's transaction topics, read on the driver.

``transactions`` holds the pure rule (a transaction resolves once its END and every change it
counts were seen; ``passed`` the transactions it passed lately, known should their END come
again; ``resnapshots`` those a new snapshot of the source settles), ``transaction_feed``
reads each transaction topic and feeds the rule (``transaction_reader`` its reading from
Kafka), and ``resolvers`` is the contract the coordinator talks to (:class:`Resolver`: the
transaction feed, or :class:`InStream` where the markers come with the rows and nothing is
read beside them).
"""

from __future__ import annotations

from .listed import Listed
from .resolvers import InStream, Resolver
from .transaction_feed import TransactionFeed, transaction_wires
from .transactions import just_below

__all__ = ["InStream", "Listed", "Resolver", "TransactionFeed", "just_below", "transaction_wires"]
