"""Everything of ctxledger that touches the world: stores, tokenizers, CLI, web, importers."""
