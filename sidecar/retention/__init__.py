"""The retention window: served exchanges kept, sealed, for replay trials (issue 14)."""
