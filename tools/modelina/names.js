// Prints the model names @asyncapi/modelina generates (TypeScript) from api/asyncapi.yaml, one a line, sorted.
// Prints the model names @asyncapi/modelina generates (TypeScript) from an AsyncAPI document.
const { TypeScriptGenerator } = require('@asyncapi/modelina');
const { Parser, fromFile } = require('@asyncapi/parser');
async function main() {
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, process.argv[2]).parse();
  if (!document) { console.error(JSON.stringify(diagnostics.filter(d => d.severity === 0), null, 1)); process.exit(1); }
  const models = await new TypeScriptGenerator().generate(document);
  console.log(models.map(m => m.modelName).sort().join('\n'));
}
main().catch(e => { console.error(e); process.exit(1); });
