"""Publish stage: the artifact and a generated model card to the hub or a local folder."""
