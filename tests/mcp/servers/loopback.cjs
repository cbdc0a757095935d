// Preloaded (node --require) into server-everything's streamable HTTP mode: it calls
// app.listen(PORT), which listens on all interfaces and has no host option, so every
// listen on a TCP port is bound to 127.0.0.1 here and the test server is never reachable
// from other machines.
const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (port, ...rest) {
  if (typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port))) {
    const callback = rest.find((item) => typeof item === "function");
    return callback ? listen.call(this, Number(port), "127.0.0.1", callback) : listen.call(this, Number(port), "127.0.0.1");
  }
  return listen.call(this, port, ...rest);
};
