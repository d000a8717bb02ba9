"""Serving: model repository, fragments, profiles, scheduler and executor."""
