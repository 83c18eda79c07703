'use strict';
// version(pkg) is the installed version of npm package pkg, read from its
// package.json (which a package's "exports" may not let require() reach).
const fs = require('node:fs');
const path = require('node:path');

module.exports = function version(pkg) {
  const file = path.join(__dirname, 'node_modules', pkg, 'package.json');
  return JSON.parse(fs.readFileSync(file, 'utf8')).version.replace(/^v/, '');
};
