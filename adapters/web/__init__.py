"""The web inspector (`ctxledger serve`): server-rendered pages over the read models."""

from ctxledger.adapters.web.app import create_app

__all__ = ["create_app"]
