"""Training of LightRetriever models: data, model wrappers, losses, loop, export."""
