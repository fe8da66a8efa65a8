{{/* Names. fullname is cut at 24 characters so that <fullname>-<zone>-stateless (zone names
have at most 16) stays within a StatefulSet name's 52 and its -headless Service within 63. */}}
{{- define "shoal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 24 | trimSuffix "-" -}}
{{- end -}}

{{- define "shoal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 24 | trimSuffix "-" -}}
{{- else if contains (include "shoal.name" .) .Release.Name -}}
{{- .Release.Name | trunc 24 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "shoal.name" .) | trunc 24 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shoal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "shoal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "shoal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shoal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shoal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shoal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "shoal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The broker StatefulSets, as a YAML list: one per zone for data brokers (always, even
with 0 replicas, so a zone can be scaled from 0) and one per zone that asks for stateless
brokers. Each entry: zone, topologyValue, role (data|stateless), name (the StatefulSet's),
headless (its headless Service), replicas, base (node.id of pod 0). Also checks what the
schema cannot: zone names unique, node id ranges disjoint. */}}
{{- define "shoal.brokerSets" -}}
{{- $fullname := include "shoal.fullname" . -}}
{{- $sets := list -}}
{{- $names := dict -}}
{{- range $zone := .Values.zones -}}
{{- if hasKey $names $zone.name -}}
{{- fail (printf "zones: the zone name %q appears twice; each zone needs its own name" $zone.name) -}}
{{- end -}}
{{- $_ := set $names $zone.name true -}}
{{- $topology := default $zone.name $zone.topologyValue -}}
{{- $base := int $zone.nodeIdBase -}}
{{- $name := printf "%s-%s" $fullname $zone.name -}}
{{- $sets = append $sets (dict "zone" $zone.name "topologyValue" $topology "role" "data" "name" $name "headless" (printf "%s-headless" $name) "replicas" (int $zone.brokers) "base" $base) -}}
{{- $stateless := int (default 0 $zone.statelessBrokers) -}}
{{- if gt $stateless 0 -}}
{{- $slBase := add $base 500 | int -}}
{{- if hasKey $zone "statelessNodeIdBase" -}}{{- $slBase = int $zone.statelessNodeIdBase -}}{{- end -}}
{{- $slName := printf "%s-%s-stateless" $fullname $zone.name -}}
{{- $sets = append $sets (dict "zone" $zone.name "topologyValue" $topology "role" "stateless" "name" $slName "headless" (printf "%s-headless" $slName) "replicas" $stateless "base" $slBase) -}}
{{- end -}}
{{- end -}}
{{- range $i, $a := $sets -}}
{{- range $j, $b := $sets -}}
{{- if and (lt $i $j) (gt (int $a.replicas) 0) (gt (int $b.replicas) 0) -}}
{{- $aEnd := add $a.base $a.replicas | int -}}
{{- $bEnd := add $b.base $b.replicas | int -}}
{{- if and (lt (int $a.base) $bEnd) (lt (int $b.base) $aEnd) -}}
{{- fail (printf "zones: node ids overlap: %s brokers of zone %s take %d..%d and %s brokers of zone %s take %d..%d; give each zone a nodeIdBase (and statelessNodeIdBase) far enough apart" $a.role $a.zone (int $a.base) (sub $aEnd 1) $b.role $b.zone (int $b.base) (sub $bEnd 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $sets -}}
{{- end -}}

{{/* etcd://host:port,.../prefix for the broker's metadata key. */}}
{{- define "shoal.metadataUrl" -}}
{{- $endpoints := list -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- $fullname := include "shoal.fullname" . -}}
{{- range $i := until (int .Values.etcd.bundled.replicas) -}}
{{- $endpoints = append $endpoints (printf "%s-etcd-%d.%s-etcd-headless.%s.svc.%s:2379" $fullname $i $fullname $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- else -}}
{{- $endpoints = .Values.etcd.external.endpoints -}}
{{- if not $endpoints -}}
{{- fail "etcd.external.endpoints: list the external etcd's HOST:PORT endpoints, or set etcd.bundled.enabled=true" -}}
{{- end -}}
{{- end -}}
{{- printf "etcd://%s/%s" (join "," $endpoints) .Values.etcd.prefix -}}
{{- end -}}

{{/* A TOML value: strings as TOML basic strings (JSON's escapes are TOML's), booleans,
integers without an exponent. */}}
{{- define "shoal.tomlValue" -}}
{{- if kindIs "bool" . -}}
{{- ternary "true" "false" . -}}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 .) (floor .) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else -}}
{{- toString . | toJson -}}
{{- end -}}
{{- end -}}

{{/* The broker's TOML config file. */}}
{{- define "shoal.config" -}}
{{- $managed := dict
  "node.id" "zones[].nodeIdBase (node.id = base + pod ordinal)"
  "az" "zones[].name"
  "listen" "ports.kafka"
  "advertise" "the pod's name in its headless Service"
  "rpc.listen" "ports.rpc"
  "rpc.advertise" "the pod's name in its headless Service"
  "metrics.listen" "ports.metrics"
  "data.dir" "persistence"
  "stateless" "zones[].statelessBrokers"
  "metadata" "etcd"
  "object.store" "objectStore.url"
  "tiering.enable" "tiering.enable"
  "tiering.spark.master" "tiering.spark.master"
  "tiering.spark.submit" "tiering.spark.submit" -}}
{{- range $key, $_ := .Values.config -}}
{{- if hasKey $managed $key -}}
{{- fail (printf "config.%s: the chart sets this key from %s; remove it from config" $key (get $managed $key)) -}}
{{- end -}}
{{- end -}}
{{- $url := required "objectStore.url is required: the S3 bucket every broker shares, e.g. s3://my-bucket/shoal?region=eu-west-1 (docs/kubernetes.md)" .Values.objectStore.url -}}
# Rendered by the shoal chart; per-pod keys (node.id, az, advertise, rpc.advertise, data.dir,
# stateless) come from the command line and SHOAL_* variables. Keys: docs/configuration.md.
"metadata" = {{ include "shoal.metadataUrl" . | toJson }}
"object.store" = {{ $url | toJson }}
"listen" = {{ printf "0.0.0.0:%d" (int .Values.ports.kafka) | toJson }}
"rpc.listen" = {{ printf "0.0.0.0:%d" (int .Values.ports.rpc) | toJson }}
"metrics.listen" = {{ printf "0.0.0.0:%d" (int .Values.ports.metrics) | toJson }}
"tiering.enable" = {{ include "shoal.tomlValue" .Values.tiering.enable }}
"tiering.spark.master" = {{ .Values.tiering.spark.master | toJson }}
"tiering.spark.submit" = {{ .Values.tiering.spark.submit | default "" | toJson }}
{{- range $key, $value := .Values.config }}
{{ $key | toJson }} = {{ include "shoal.tomlValue" $value }}
{{- end }}
{{- end -}}
