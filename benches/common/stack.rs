//! The fixture stack of the renderer and process benches, generated in the shape of the SCS
//! openstack stack: a multi-stage cluster addon with a CNI-like chart of many templates, a large
//! values file, CRDs and Cilium's default Hubble certificates (`genCA`, two `genSignedCert`), and
//! CSI-, CCM- and metrics-server-like charts, each with a per-Cluster values template
//! (`overwrite.yaml`) over `.Cluster`.

#![allow(dead_code)] // each bench that includes this module uses a part of it

use std::fmt::Write as _;
use std::path::Path;

pub const STACK: &str = "openstack-bench-1-32";
pub const KUBERNETES: &str = "v1.32.4";
pub const STAGES: [&str; 4] = ["cni", "csi", "ccm", "metrics-server"];

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A chart of `components` templated ConfigMaps (each over its own block of values, with `keys`
/// settings), a DaemonSet, helpers; `certs` adds a CA and signed certificates as Cilium's Hubble
/// does by default, `crds` CRDs.
pub fn chart(dir: &Path, name: &str, components: usize, keys: usize, certs: bool, crds: usize) {
    write(&dir.join("Chart.yaml"), &format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\nappVersion: \"1.0.0\"\n"));
    let mut values =
        String::from("cluster:\n  name: default\n  podCidr: 10.0.0.0/16\n  apiHost: \"\"\nimage:\n  registry: quay.io\n  tag: v1.0.0\n");
    for c in 0..components {
        let _ = writeln!(values, "component{c}:\n  enabled: true\n  replicas: {}\n  settings:", 1 + c % 3);
        for k in 0..keys {
            let _ = writeln!(values, "    key-{k}: \"value {c}.{k}\"");
        }
    }
    write(&dir.join("values.yaml"), &values);
    write(
        &dir.join("templates/_helpers.tpl"),
        &format!(
            "{{{{- define \"{name}.fullname\" -}}}}{{{{ printf \"%s-%s\" .Release.Name .Chart.Name | trunc 63 | trimSuffix \"-\" }}}}{{{{- end }}}}\n\
             {{{{- define \"{name}.labels\" -}}}}\napp.kubernetes.io/name: {{{{ .Chart.Name }}}}\napp.kubernetes.io/instance: {{{{ .Release.Name }}}}\nhelm.sh/chart: {{{{ .Chart.Name }}}}-{{{{ .Chart.Version }}}}\n{{{{- end }}}}\n"
        ),
    );
    for c in 0..components {
        write(
            &dir.join(format!("templates/component-{c}.yaml")),
            &format!(
                "{{{{- if .Values.component{c}.enabled }}}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ include \"{name}.fullname\" . }}}}-c{c}\n  namespace: {{{{ .Release.Namespace }}}}\n  labels:\n    {{{{- include \"{name}.labels\" . | nindent 4 }}}}\ndata:\n  cluster: {{{{ .Values.cluster.name | quote }}}}\n  pod-cidr: {{{{ .Values.cluster.podCidr | quote }}}}\n  replicas: {{{{ .Values.component{c}.replicas | quote }}}}\n  settings.yaml: |\n    {{{{- toYaml .Values.component{c}.settings | nindent 4 }}}}\n  {{{{- range $k, $v := .Values.component{c}.settings }}}}\n  {{{{ $k }}}}: {{{{ $v | quote }}}}\n  {{{{- end }}}}\n{{{{- end }}}}\n"
            ),
        );
    }
    write(
        &dir.join("templates/daemonset.yaml"),
        &format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: {{{{ include \"{name}.fullname\" . }}}}\n  namespace: {{{{ .Release.Namespace }}}}\nspec:\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n      annotations:\n        checksum/config: {{{{ include (print $.Template.BasePath \"/component-0.yaml\") . | sha256sum }}}}\n    spec:\n      containers:\n        - name: {name}\n          image: \"{{{{ .Values.image.registry }}}}/{name}:{{{{ .Values.image.tag }}}}\"\n          env:\n            - {{name: K8S_SERVICE_HOST, value: {{{{ .Values.cluster.apiHost | quote }}}}}}\n"
        ),
    );
    if certs {
        write(
            &dir.join("templates/tls.yaml"),
            "{{- $ca := genCA \"hubble-ca.cilium.io\" 1095 }}\n{{- $server := genSignedCert \"*.default.hubble-grpc.cilium.io\" nil (list \"*.default.hubble-grpc.cilium.io\") 1095 $ca }}\n{{- $relay := genSignedCert \"*.hubble-relay.cilium.io\" nil (list \"*.hubble-relay.cilium.io\") 1095 $ca }}\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hubble-server-certs\n  namespace: {{ .Release.Namespace }}\ntype: kubernetes.io/tls\ndata:\n  ca.crt: {{ $ca.Cert | b64enc }}\n  tls.crt: {{ $server.Cert | b64enc }}\n  tls.key: {{ $server.Key | b64enc }}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hubble-relay-client-certs\n  namespace: {{ .Release.Namespace }}\ntype: kubernetes.io/tls\ndata:\n  ca.crt: {{ $ca.Cert | b64enc }}\n  tls.crt: {{ $relay.Cert | b64enc }}\n  tls.key: {{ $relay.Key | b64enc }}\n",
        );
    }
    for c in 0..crds {
        write(
            &dir.join(format!("crds/crd-{c}.yaml")),
            &format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things{c}.{name}.example.org\nspec:\n  group: {name}.example.org\n  names: {{kind: Thing{c}, plural: things{c}}}\n  scope: Namespaced\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
            ),
        );
    }
    // The per-Cluster values template, as the SCS stacks' overwrite.yaml.
    write(
        &dir.join("overwrite.yaml"),
        "values: |\n  cluster:\n    name: {{ .Cluster.metadata.name }}\n    podCidr: {{ index .Cluster.spec.clusterNetwork.pods.cidrBlocks 0 | quote }}\n    apiHost: {{ .Cluster.spec.controlPlaneEndpoint.host | quote }}\n",
    );
}

/// The release: metadata, a small ClusterClass chart, the four stages (sizes as the SCS openstack
/// stack's: Cilium has about a hundred templates, the others ten to twenty).
pub fn release(root: &Path) {
    write(
        &root.join("metadata.yaml"),
        &format!(
            "apiVersion: metadata.clusterstack.x-k8s.io/v1alpha1\nversions:\n  clusterStack: v1\n  kubernetes: {KUBERNETES}\n  components:\n    clusterAddon: v1\n"
        ),
    );
    let class = root.join(format!("{STACK}-cluster-class-v1"));
    write(&class.join("Chart.yaml"), &format!("apiVersion: v2\nname: {STACK}-cluster-class\nversion: v1\n"));
    write(&class.join("templates/cc.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cc\n");
    let addon = root.join(format!("{STACK}-cluster-addon-v1"));
    chart(&addon.join("cni"), "cni", 90, 24, true, 8);
    chart(&addon.join("csi"), "csi", 18, 12, false, 2);
    chart(&addon.join("ccm"), "ccm", 10, 10, false, 0);
    chart(&addon.join("metrics-server"), "metrics-server", 8, 8, false, 0);
    let stages: String = STAGES.iter().map(|s| format!("    - name: {s}\n      action: apply\n")).collect();
    write(
        &root.join("clusteraddon.yaml"),
        &format!(
            "apiVersion: clusteraddonconfig.x-k8s.io/v1alpha1\nclusterAddonVersion: clusteraddons.clusterstack.x-k8s.io/v1alpha1\naddonStages:\n  AfterControlPlaneInitialized:\n{stages}"
        ),
    );
}

/// Every file of the release under `root`, as `(path relative to root, content)`.
pub fn files(root: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).expect("read the release") {
            let path = e.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("inside").to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&path).expect("a text file")));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Makes every object of the release under `root` carry its Cluster's name (`.Values.cluster.name`,
/// which `overwrite.yaml` sets): names, the certificates' Secrets, and the CRDs (moved into
/// `templates/` with a group of their own, since `crds/` is not templated) — for Clusters that
/// share one workload API server, as the process bench's do, where fixed names would make the
/// Clusters overwrite each other's objects.
pub fn names_per_cluster(root: &Path) {
    for (rel, text) in files(root) {
        let path = root.join(&rel);
        let mut text = text
            .replace(r#"printf "%s-%s" .Release.Name .Chart.Name"#, r#"printf "%s-%s-%s" .Release.Name .Chart.Name .Values.cluster.name"#)
            .replace("name: hubble-server-certs\n", "name: hubble-server-certs-{{ .Values.cluster.name }}\n")
            .replace("name: hubble-relay-client-certs\n", "name: hubble-relay-client-certs-{{ .Values.cluster.name }}\n");
        let crd = rel.rsplit_once("/crds/").map(|(chart, file)| (chart.to_owned(), file.to_owned()));
        if let Some((chart, file)) = crd {
            let name = chart.rsplit('/').next().unwrap_or_default().to_owned();
            text = text.replace(&format!("{name}.example.org"), &format!("{{{{ .Values.cluster.name }}}}.{name}.example.org"));
            std::fs::remove_file(&path).expect("move the CRD");
            write(&root.join(chart).join("templates").join(file), &text);
        } else {
            std::fs::write(&path, text).expect("write");
        }
    }
}
