// A NestJS app in plain JavaScript, for tests/spec_url.rs (decorators applied with
// Reflect.decorate, as TypeScript compiles them): /search carries x-rate-limit through
// @nestjs/swagger's @ApiExtension, /items nothing; the generated document is at /openapi.json.
require('reflect-metadata');
const {NestFactory} = require('@nestjs/core');
const {Module, Controller, Get} = require('@nestjs/common');
const {SwaggerModule, DocumentBuilder, ApiExtension} = require('@nestjs/swagger');

class Search {
  search() { return {ok: true}; }
  items() { return {ok: true}; }
}
const method = name => Object.getOwnPropertyDescriptor(Search.prototype, name);
Reflect.decorate(
  [Get('search'), ApiExtension('x-rate-limit', {per: 'route', limit: 3, window: 'PT1H'})],
  Search.prototype, 'search', method('search'));
Reflect.decorate([Get('items')], Search.prototype, 'items', method('items'));
const SearchController = Reflect.decorate([Controller()], Search);

class App {}
const AppModule = Reflect.decorate([Module({controllers: [SearchController]})], App);

(async () => {
  const app = await NestFactory.create(AppModule, {logger: false});
  const doc = SwaggerModule.createDocument(app, new DocumentBuilder().setTitle('nest').setVersion('1').build());
  app.getHttpAdapter().get('/openapi.json', (req, res) => res.json(doc));
  await app.listen(Number(process.argv[2] || 3000), '127.0.0.1');
})();
