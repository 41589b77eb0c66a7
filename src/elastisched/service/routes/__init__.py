"""The API's routes, one module per resource: `meta` (health, status, metrics, dashboard page), `jobs`, `cluster`
(nodes, loans, reclaims) and `dashboard` (read-only data the page polls); `context` holds what they share."""
