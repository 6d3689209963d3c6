// Compiles every schema of api/schemas with Ajv (draft 2020-12) in strict mode, with allowUnionTypes
// (order_id and the nullable fields take two JSON types); prints each failure and exits 1 on any.
const Ajv2020 = require('ajv/dist/2020'); const addFormats = require('ajv-formats');
const fs = require('fs'); const dir = process.argv[2];
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true, logger: { log: console.log, warn: (...a) => console.log('WARN', ...a), error: (...a) => console.log('ERROR', ...a) } });
addFormats(ajv);
for (const f of fs.readdirSync(dir).filter(f => f.endsWith('.json'))) ajv.addSchema(JSON.parse(fs.readFileSync(dir + '/' + f)));
for (const f of fs.readdirSync(dir).filter(f => f.endsWith('.json'))) {
  try { ajv.getSchema(JSON.parse(fs.readFileSync(dir + '/' + f)).$id); } catch (e) { console.log('FAIL', f, e.message); process.exitCode = 1; }
}
console.log('ajv strict: every schema compiled');
