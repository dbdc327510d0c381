// Package rig is the root of everything in this module that exists for
// tests, examples and soaks: the upper of internal/'s two floors.
//
// The rigs sit above everything they exercise (they import stage, bridge,
// clock and observer), so they live in one tree apart from the runtime's
// own internal packages (internal/state, wait, buildinfo, kclient,
// kafkasec, kafkahash), which import nothing above them. No runtime
// package imports a rig; internal/depcheck holds the rule by package path.
//
//   - broker: the embedded cluster (franz-go's kfake, or a leased real
//     cluster) every integration test, example and parsley-observe demo
//     runs on
//   - netsoak: network faults through in-process proxies, embedded broker
//   - failover: broker kills on a three-node real Kafka cluster
//   - testkafka: the real-Kafka launcher (JVMs from Maven Central, its
//     pom.xml beside it); it and the embedded broker speak one
//     vocabulary, broker.Launcher
//   - hostsim: the model of a cluster the stage host's simulator runs on
//   - oracle: the verification kit's shared judge (exactly once, in
//     order per lane), used by netsoak's and failover's oracles and by
//     adapters/adaptertest
//   - obsdemo: the observer's demo topologies (its tests and
//     parsley-observe demo)
//   - aliascodec: the zero-copy state codec stagetest exports
//   - obstest, testcert, jaegertest: helpers of the observer's, the
//     secured clients' and the tracing tests
package rig
