// Runs the @nestjs/swagger CLI plugin inside ts-jest with the same options as nest-cli.json.
const transformer = require('@nestjs/swagger/plugin');
const nestCli = require('../nest-cli.json');

const options = nestCli.compilerOptions.plugins.find((p) => p.name === '@nestjs/swagger').options;
module.exports.name = 'nestjs-swagger-transformer';
module.exports.version = 1;
module.exports.factory = (cs) => transformer.before(options, cs.program);
