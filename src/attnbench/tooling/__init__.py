"""Tools around the project that are not the engine: the headless-browser check of the built site."""
