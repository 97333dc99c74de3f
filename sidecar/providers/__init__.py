"""Provider clients: one httpx.AsyncClient per upstream, results as values."""
