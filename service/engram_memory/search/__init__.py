"""Pure search computation: tokenizer, field terms, offline_lexical_v1 ranking, receipts,
page cursors, redaction and the packet budget (SPEC §4.1, §9.6, §10).

Nothing here runs SQL or speaks MCP: the store feeds documents or index statistics in, the
tools layer takes ordered results, receipts and packets out.
"""
