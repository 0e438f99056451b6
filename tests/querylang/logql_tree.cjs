// Parse LogQL queries with Grafana's own grammar (@grafana/lezer-logql) and print their syntax
// trees as JSON: stdin is a JSON array of queries, stdout a JSON array of trees, each node
// {"type", "text", "error", "children"}. Used by tests/querylang/logql.py.
"use strict";
const { parser } = require("@grafana/lezer-logql");

function tree(query) {
  const stack = [{ children: [] }];
  parser.parse(query).iterate({
    enter(node) {
      const item = { type: node.name, text: query.slice(node.from, node.to), error: node.type.isError, children: [] };
      stack[stack.length - 1].children.push(item);
      stack.push(item);
    },
    leave() {
      stack.pop();
    },
  });
  return stack[0].children[0];
}

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => process.stdout.write(JSON.stringify(JSON.parse(input).map(tree))));
