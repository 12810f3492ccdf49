// Starts Swagger UI on the page at /docs over the API's OpenAPI document (same origin, no CDN).
"use strict";
window.ui = SwaggerUIBundle({
  url: new URL("openapi.json", document.baseURI).href,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis],
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null, // never send the document to an online validator
});
