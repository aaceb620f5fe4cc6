"""Request handlers, one module per API family, and the table the server dispatches on."""
