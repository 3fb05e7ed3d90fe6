// An independent OPC UA server for apbridge's interop tests: node-opcua,
// configured by one JSON argument, controlled by lines on stdin.
//
//   node server.js '{"port":4840,"serviceLevel":250,"policies":["None","Basic256Sha256"],
//                    "modes":["None","Sign","SignAndEncrypt"],"users":{"relay":"secret"},
//                    "anonymous":true,"counterMs":100,"pki":"/tmp/pki","namespaces":["urn:a","urn:b"],
//                    "applicationUri":"urn:a:server","redundancySupport":"Warm",
//                    "serverUris":["urn:a:server","urn:b:server"],
//                    "partners":[{"applicationUri":"urn:b:server","discoveryUrls":["opc.tcp://127.0.0.1:4841"]}]}'
//
// It prints one line "READY <endpoint> <server certificate file>" once it
// listens. Commands on stdin, one per line:
//   level N     set ServiceLevel (i=2267) to N
//   stop        shut down (as a graceful stop: ServiceLevel 0 first, then close)
// The address space: ns=<counter ns>;s=Counter (Int32, +1 every counterMs),
// ns=..;s=Setpoint (Double, writable), ns=..;s=Name (String), and "tags"
// more Int32 variables ns=..;s=T0, T1, ... for plant-scale runs: every
// countEvery-th (default every fourth) counts up every tagMs, the others
// hold their index. They are
// exception-based (MinimumSamplingInterval 0: no sampling timer per item,
// so ten thousand of them cost the server little). The counter and the
// tags are Bad_OutOfService while ServiceLevel is below 200 (Warm
// redundancy). Their
// namespace is the last one of "namespaces" (default urn:apbridge:interop),
// so that two servers can number it differently. "applicationUri" names
// the server (node-opcua's default is one URI per host); "redundancySupport"
// (a Part 5 name) and "serverUris" are what it reports of its redundant set
// (i=3709, i=11314). "partners" are other servers its FindServers answers
// with besides itself (node-opcua's own answers with itself alone; its
// discovery server, the LDS, with the servers registered there), so that
// a client given this server can find its partner.
//
// With APBRIDGE_NODEOPCUA_TRACE=<file> in its environment it appends to
// the file a line per tick of the counting tags and per value a monitored
// item of T0 takes in (see traceTo): what the server itself sampled.
"use strict";

const path = require("path");
const readline = require("readline");
const {
  OPCUAServer,
  OPCUACertificateManager,
  ApplicationDescription,
  ApplicationType,
  Variant,
  VariantArrayType,
  DataValue,
  DataType,
  SecurityPolicy,
  MessageSecurityMode,
  StatusCodes,
  MonitoredItem,
} = require("node-opcua");
const fs = require("fs");

const cfg = Object.assign(
  {
    port: 4840,
    serviceLevel: 255,
    policies: ["None"],
    modes: ["None"],
    users: {},
    anonymous: true,
    counterMs: 100,
    pki: path.join(__dirname, "pki"),
    namespaces: ["urn:apbridge:interop"],
    trustClients: true,
    tags: 0,
    tagMs: 1000,
    countEvery: 4,
    applicationUri: "",
    redundancySupport: "",
    serverUris: null,
    partners: [],
  },
  JSON.parse(process.argv[2] || "{}"),
);

async function main() {
  const serverCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: cfg.trustClients,
    rootFolder: path.join(cfg.pki, "server"),
  });
  await serverCertificateManager.initialize();
  const userCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: cfg.trustClients,
    rootFolder: path.join(cfg.pki, "user"),
  });
  await userCertificateManager.initialize();

  const server = new OPCUAServer({
    serverInfo: cfg.applicationUri ? { applicationUri: cfg.applicationUri } : undefined,
    port: cfg.port,
    hostname: "127.0.0.1",
    alternateHostname: ["127.0.0.1"],
    resourcePath: "",
    serverCertificateManager,
    userCertificateManager,
    securityPolicies: cfg.policies.map((p) => SecurityPolicy[p]),
    securityModes: cfg.modes.map((m) => MessageSecurityMode[m]),
    allowAnonymous: cfg.anonymous,
    userManager: {
      isValidUser: (user, password) => Object.prototype.hasOwnProperty.call(cfg.users, user) && cfg.users[user] === password,
    },
    buildInfo: { productName: "apbridge interop (node-opcua)", manufacturerName: "apbridge tests" },
    serverCapabilities: { maxSessions: 50 },
  });
  await server.initialize();

  const addressSpace = server.engine.addressSpace;
  let ns;
  for (const uri of cfg.namespaces) {
    ns = addressSpace.registerNamespace(uri);
  }
  const folder = ns.addFolder(addressSpace.rootFolder.objects, { browseName: "Interop" });
  let level = cfg.serviceLevel;
  let counter = 0;
  let counterTime = new Date();
  ns.addVariable({
    componentOf: folder,
    nodeId: "s=Counter",
    browseName: "Counter",
    dataType: "Int32",
    minimumSamplingInterval: 10,
    value: {
      timestamped_get: () =>
        new DataValue({
          value: new Variant({ dataType: DataType.Int32, value: counter }),
          sourceTimestamp: counterTime,
          serverTimestamp: new Date(),
          // Warm redundancy: a server below the Healthy band (200) does
          // not serve data.
          statusCode: level < 200 ? StatusCodes.BadOutOfService : StatusCodes.Good,
        }),
    },
  });
  let setpoint = 20.5;
  ns.addVariable({
    componentOf: folder,
    nodeId: "s=Setpoint",
    browseName: "Setpoint",
    minimumSamplingInterval: 50,
    dataType: "Double",
    accessLevel: "CurrentRead | CurrentWrite",
    userAccessLevel: "CurrentRead | CurrentWrite",
    value: {
      get: () => new Variant({ dataType: DataType.Double, value: setpoint }),
      set: (v) => {
        setpoint = v.value;
        return StatusCodes.Good;
      },
    },
  });
  ns.addVariable({
    componentOf: folder,
    nodeId: "s=Name",
    browseName: "Name",
    minimumSamplingInterval: 50,
    dataType: "String",
    value: { get: () => new Variant({ dataType: DataType.String, value: "interop" }) },
  });
  setInterval(() => {
    counter++;
    counterTime = new Date();
  }, cfg.counterMs).unref();

  // Plant-scale tags: set from the source, so that monitored items follow
  // value changes instead of sampling ten thousand getters.
  const tags = [];
  const setTag = (t, now) =>
    t.node.setValueFromSource(
      new Variant({ dataType: DataType.Int32, value: t.v }),
      level < 200 ? StatusCodes.BadOutOfService : StatusCodes.Good,
      now,
    );
  for (let i = 0; i < cfg.tags; i++) {
    const node = ns.addVariable({
      componentOf: folder,
      nodeId: `s=T${i}`,
      browseName: `T${i}`,
      dataType: "Int32",
      minimumSamplingInterval: 0,
    });
    const counts = i % cfg.countEvery === 0;
    const t = { node, v: counts ? 0 : i, counts };
    setTag(t, new Date());
    tags.push(t);
  }
  const counting = tags.filter((t) => t.counts);
  const trace = traceTo(process.env.APBRIDGE_NODEOPCUA_TRACE, cfg.port);
  if (counting.length > 0) {
    setInterval(() => {
      const now = new Date();
      for (const t of counting) {
        t.v++;
        setTag(t, now);
      }
      trace(`tick T0=${counting[0].v}`);
    }, cfg.tagMs).unref();
  }

  // The redundant set, as the server describes it (OPC UA Part 5).
  const redundancyModes = { None: 0, Cold: 1, Warm: 2, Hot: 3, Transparent: 4, HotAndMirrored: 5 };
  if (cfg.redundancySupport) {
    if (!(cfg.redundancySupport in redundancyModes)) {
      throw new Error(`redundancySupport ${cfg.redundancySupport} is not a Part 5 name`);
    }
    addressSpace.findNode("i=3709").setValueFromSource(
      new Variant({ dataType: DataType.Int32, value: redundancyModes[cfg.redundancySupport] }),
    );
  }
  if (cfg.serverUris) {
    addressSpace.findNode("i=11314").setValueFromSource(
      new Variant({ dataType: DataType.String, arrayType: VariantArrayType.Array, value: cfg.serverUris }),
    );
  }

  // FindServers chooses from getServers (and filters by the request's
  // serverUris): the partners are added there, as node-opcua's LDS adds
  // the servers registered with it.
  if (cfg.partners.length > 0) {
    const own = server.getServers.bind(server);
    server.getServers = (channel) =>
      own(channel).concat(
        cfg.partners.map(
          (p) =>
            new ApplicationDescription({
              applicationUri: p.applicationUri,
              productUri: "urn:apbridge:interop",
              applicationName: { text: "partner " + p.applicationUri },
              applicationType: ApplicationType.Server,
              discoveryUrls: p.discoveryUrls,
            }),
        ),
      );
  }

  const sl = addressSpace.findNode("i=2267");
  sl.bindVariable({ get: () => new Variant({ dataType: DataType.Byte, value: level }) }, true);

  await server.start();
  const endpoint = server.getEndpointUrl();
  process.stdout.write(`READY ${endpoint} ${server.certificateFile}\n`);

  const rl = readline.createInterface({ input: process.stdin });
  rl.on("line", async (line) => {
    const [cmd, arg] = line.trim().split(/\s+/);
    if (cmd === "level") {
      level = Number(arg);
      counterTime = new Date(); // the status changes: a new sample
      tags.forEach((t) => setTag(t, counterTime));
      process.stdout.write(`OK level ${level}\n`);
    } else if (cmd === "stop") {
      level = 0;
      counterTime = new Date();
      tags.forEach((t) => setTag(t, counterTime));
      await server.shutdown(Number(arg || 0));
      process.stdout.write("STOPPED\n");
      process.exit(0);
    }
  });
  rl.on("close", async () => {
    await server.shutdown(0);
    process.exit(0);
  });
}

// traceTo is a debug aid, on when APBRIDGE_NODEOPCUA_TRACE names a file:
// it appends a line per tick of the counting tags (T0's value) and per
// value a monitored item of T0 takes in (sampled or changed), so that a
// counter value missing downstream can be told apart: never taken in by
// the server's monitored item, or taken in and lost after it.
function traceTo(file, port) {
  if (!file) {
    return () => {};
  }
  const out = fs.createWriteStream(file, { flags: "a" });
  const line = (s) => out.write(`${Date.now()} ${port} ${s}\n`);
  const own = MonitoredItem.prototype._on_value_changed;
  MonitoredItem.prototype._on_value_changed = function (dataValue, indexRange) {
    if (this.node && this.node.nodeId.value === "T0") {
      line(`item ${this.monitoredItemId} sampling=${this.samplingInterval} T0=${dataValue.value.value}`);
    }
    return own.call(this, dataValue, indexRange);
  };
  return line;
}

main().catch((err) => {
  process.stderr.write(`server failed: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
