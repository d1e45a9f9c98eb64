// Applies an overlay with openapi-format's own applier: node apply.js SPEC.json OVERLAY.json
// prints the document it makes as JSON. Both inputs are JSON (the test converts YAML first), so
// only the overlay semantics are compared, not two YAML parsers.
const fs = require('fs');
const {openapiOverlay} = require('openapi-format');

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const overlay = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const result = await openapiOverlay(spec, {overlaySet: overlay});
  process.stdout.write(JSON.stringify(result.data));
})();
