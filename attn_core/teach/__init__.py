"""The book's teaching helpers: what the chapters use to show, train, measure and check (floor 6).

Not part of any model. Printing comparisons (:mod:`.compare`), the one verdict rule between
trained variants and its floors (:mod:`.evidence`, :mod:`.floors`), a tiny seeded trainer
(:mod:`.training`) and synthetic tasks (:mod:`.tasks`, :mod:`.seq2seq_tasks`); heatmaps and the
explorer widgets (:mod:`.plots`, :mod:`.explorers`, :mod:`.viz`, :mod:`.kernel_explorer`, with
the page-side ``explorer.js``); deliberately wrong versions (:mod:`.mistakes`); finding heads
and outliers in trained models (:mod:`.heads`, :mod:`.outliers`); windows in a stack and
StreamingLLM's cache (:mod:`.window`, :mod:`.streaming`); the shipped Shakespeare model
(:mod:`.pretrained`); the package's own code shown on a page (:mod:`.source`); skip messages
(:mod:`.reporting`); timing, memory and FLOP counts
(:mod:`.measure`); and the exercises' check functions (:mod:`.exercises`).

May import every floor of the library; nothing in the library imports it back.
"""
