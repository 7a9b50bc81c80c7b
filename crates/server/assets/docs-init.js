// Starts the vendored Swagger UI on this server's OpenAPI document.
// validatorUrl: null keeps Swagger UI from contacting any outside validator.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/api/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  validatorUrl: null,
  tryItOutEnabled: false,
});
