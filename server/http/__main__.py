"""``python -m offsetstore.server.http``: prints the OpenAPI description (docs/openapi.json is this output)."""

from offsetstore.server.http.describe import openapi_json

print(openapi_json(), end="")
