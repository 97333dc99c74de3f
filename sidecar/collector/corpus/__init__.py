"""Corpus evidence (issue 13): datasets, slices, suites and comparison groups up to their
admission. Experiments over a corpus always run control-plane-side; this package gives the
control plane (``shadowtrial collector``) its API (:func:`sidecar.collector.corpus.api.corpus_routes`).
Running an admitted group (dispatch, scheduling, crash semantics) is not built yet.
"""
