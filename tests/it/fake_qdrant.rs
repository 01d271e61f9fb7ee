//! An in-process Qdrant gRPC server built on the server traits `qdrant-client` exports, so the
//! real client talks the real protocol over a real socket (no Qdrant server can be installed
//! here). It implements what `gym serve` uses — collections, a payload index, upsert, count and
//! nearest-neighbour query with `must` keyword-match filters, cosine distance — exactly, and
//! answers anything else with `UNIMPLEMENTED`, so a new call in the client shows up as a failure.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use qdrant_client::qdrant::collections_server::{Collections, CollectionsServer};
use qdrant_client::qdrant::points_server::{Points, PointsServer};
use qdrant_client::qdrant::qdrant_server::{Qdrant, QdrantServer};
use qdrant_client::qdrant::{self as q, condition, r#match, point_id, value, vector, vectors};
use tonic::{Request, Response, Status};

#[derive(Debug, Default)]
pub struct Collection {
    pub dimensions: u64,
    pub indexed_fields: Vec<String>,
    pub points: HashMap<u64, (Vec<f32>, HashMap<String, q::Value>)>,
}

#[derive(Clone, Default)]
pub struct Store {
    pub collections: Arc<Mutex<HashMap<String, Collection>>>,
    /// The RPCs served, by name, in order.
    pub calls: Arc<Mutex<Vec<&'static str>>>,
}

impl Store {
    fn record(&self, rpc: &'static str) {
        self.calls.lock().unwrap().push(rpc);
    }

    pub fn calls(&self, rpc: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| **c == rpc)
            .count()
    }

    /// The experiences stored in set `root` (hex) of `collection`, sorted.
    pub fn experiences(&self, collection: &str, root: &str) -> Vec<String> {
        let collections = self.collections.lock().unwrap();
        let Some(collection) = collections.get(collection) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = collection
            .points
            .values()
            .filter(|(_, payload)| keyword(payload.get("root")) == Some(root))
            .filter_map(
                |(_, payload)| match payload.get("experience")?.kind.as_ref()? {
                    value::Kind::StringValue(text) => Some(text.clone()),
                    _ => None,
                },
            )
            .collect();
        ids.sort();
        ids
    }
}

fn keyword(value: Option<&q::Value>) -> Option<&str> {
    match value?.kind.as_ref()? {
        value::Kind::StringValue(text) => Some(text),
        _ => None,
    }
}

fn missing(name: &str) -> Status {
    Status::not_found(format!("Collection `{name}` doesn't exist!"))
}

/// Whether `payload` passes `filter`; only `must` conditions matching a keyword are supported.
fn passes(filter: Option<&q::Filter>, payload: &HashMap<String, q::Value>) -> Result<bool, Status> {
    let Some(filter) = filter else {
        return Ok(true);
    };
    if !filter.should.is_empty() || !filter.must_not.is_empty() || filter.min_should.is_some() {
        return Err(Status::unimplemented("only `must` filters"));
    }
    for condition in &filter.must {
        let Some(condition::ConditionOneOf::Field(field)) = &condition.condition_one_of else {
            return Err(Status::unimplemented("only field conditions"));
        };
        let Some(r#match::MatchValue::Keyword(wanted)) =
            field.r#match.as_ref().and_then(|m| m.match_value.as_ref())
        else {
            return Err(Status::unimplemented("only keyword matches"));
        };
        if keyword(payload.get(&field.key)) != Some(wanted.as_str()) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[allow(deprecated)]
fn dense(vectors: Option<q::Vectors>) -> Result<Vec<f32>, Status> {
    match vectors.and_then(|v| v.vectors_options) {
        Some(vectors::VectorsOptions::Vector(v)) => match v.vector {
            Some(vector::Vector::Dense(dense)) => Ok(dense.data),
            None if !v.data.is_empty() => Ok(v.data),
            _ => Err(Status::invalid_argument("only dense vectors")),
        },
        _ => Err(Status::invalid_argument("a point needs one unnamed vector")),
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b)).max(f32::MIN_POSITIVE)
}

fn done() -> q::PointsOperationResponse {
    q::PointsOperationResponse {
        result: Some(q::UpdateResult {
            operation_id: Some(0),
            status: q::UpdateStatus::Completed as i32,
        }),
        time: 0.0,
        usage: None,
    }
}

/// Implements a tonic service trait: the listed methods, plus `UNIMPLEMENTED` stubs.
macro_rules! service {
    (impl $trait:ident { $($body:item)* } unimplemented { $($rpc:ident($req:ident) -> $resp:ident;)* }) => {
        #[tonic::async_trait]
        impl $trait for Store {
            $($body)*
            $(
                async fn $rpc(&self, _: Request<q::$req>) -> Result<Response<q::$resp>, Status> {
                    Err(Status::unimplemented(stringify!($rpc)))
                }
            )*
        }
    };
}

service! {
    impl Qdrant {
        async fn health_check(
            &self,
            _: Request<q::HealthCheckRequest>,
        ) -> Result<Response<q::HealthCheckReply>, Status> {
            self.record("health_check");
            Ok(Response::new(q::HealthCheckReply {
                title: "gym test qdrant".into(),
                version: "1.20.0".into(),
                commit: None,
            }))
        }
    }
    unimplemented {}
}

service! {
    impl Collections {
        async fn collection_exists(
            &self,
            request: Request<q::CollectionExistsRequest>,
        ) -> Result<Response<q::CollectionExistsResponse>, Status> {
            self.record("collection_exists");
            let exists = self
                .collections
                .lock()
                .unwrap()
                .contains_key(&request.get_ref().collection_name);
            Ok(Response::new(q::CollectionExistsResponse {
                result: Some(q::CollectionExists { exists }),
                time: 0.0,
            }))
        }

        async fn create(
            &self,
            request: Request<q::CreateCollection>,
        ) -> Result<Response<q::CollectionOperationResponse>, Status> {
            self.record("create");
            let request = request.into_inner();
            let Some(q::vectors_config::Config::Params(params)) =
                request.vectors_config.and_then(|c| c.config)
            else {
                return Err(Status::invalid_argument("one unnamed vector per point"));
            };
            if params.distance != q::Distance::Cosine as i32 {
                return Err(Status::unimplemented("only cosine distance"));
            }
            let mut collections = self.collections.lock().unwrap();
            if collections.contains_key(&request.collection_name) {
                return Err(Status::already_exists(request.collection_name));
            }
            collections.insert(
                request.collection_name,
                Collection {
                    dimensions: params.size,
                    ..Collection::default()
                },
            );
            Ok(Response::new(q::CollectionOperationResponse {
                result: true,
                time: 0.0,
            }))
        }

        async fn get(
            &self,
            request: Request<q::GetCollectionInfoRequest>,
        ) -> Result<Response<q::GetCollectionInfoResponse>, Status> {
            self.record("get");
            let name = &request.get_ref().collection_name;
            let collections = self.collections.lock().unwrap();
            let collection = collections.get(name).ok_or_else(|| missing(name))?;
            let params = q::VectorParams {
                size: collection.dimensions,
                distance: q::Distance::Cosine as i32,
                ..q::VectorParams::default()
            };
            Ok(Response::new(q::GetCollectionInfoResponse {
                result: Some(q::CollectionInfo {
                    points_count: Some(collection.points.len() as u64),
                    config: Some(q::CollectionConfig {
                        params: Some(q::CollectionParams {
                            vectors_config: Some(q::VectorsConfig {
                                config: Some(q::vectors_config::Config::Params(params)),
                            }),
                            ..q::CollectionParams::default()
                        }),
                        ..q::CollectionConfig::default()
                    }),
                    ..q::CollectionInfo::default()
                }),
                time: 0.0,
            }))
        }
    }
    unimplemented {
        list(ListCollectionsRequest) -> ListCollectionsResponse;
        update(UpdateCollection) -> CollectionOperationResponse;
        delete(DeleteCollection) -> CollectionOperationResponse;
        update_aliases(ChangeAliases) -> CollectionOperationResponse;
        list_collection_aliases(ListCollectionAliasesRequest) -> ListAliasesResponse;
        list_aliases(ListAliasesRequest) -> ListAliasesResponse;
        collection_cluster_info(CollectionClusterInfoRequest) -> CollectionClusterInfoResponse;
        update_collection_cluster_setup(UpdateCollectionClusterSetupRequest) -> UpdateCollectionClusterSetupResponse;
        create_shard_key(CreateShardKeyRequest) -> CreateShardKeyResponse;
        delete_shard_key(DeleteShardKeyRequest) -> DeleteShardKeyResponse;
        list_shard_keys(ListShardKeysRequest) -> ListShardKeysResponse;
    }
}

service! {
    impl Points {
        async fn create_field_index(
            &self,
            request: Request<q::CreateFieldIndexCollection>,
        ) -> Result<Response<q::PointsOperationResponse>, Status> {
            self.record("create_field_index");
            let request = request.into_inner();
            let mut collections = self.collections.lock().unwrap();
            let collection = collections
                .get_mut(&request.collection_name)
                .ok_or_else(|| missing(&request.collection_name))?;
            collection.indexed_fields.push(request.field_name);
            Ok(Response::new(done()))
        }

        async fn upsert(
            &self,
            request: Request<q::UpsertPoints>,
        ) -> Result<Response<q::PointsOperationResponse>, Status> {
            self.record("upsert");
            let request = request.into_inner();
            let mut collections = self.collections.lock().unwrap();
            let collection = collections
                .get_mut(&request.collection_name)
                .ok_or_else(|| missing(&request.collection_name))?;
            let mut points = Vec::new();
            for point in request.points {
                let Some(point_id::PointIdOptions::Num(id)) =
                    point.id.and_then(|id| id.point_id_options)
                else {
                    return Err(Status::invalid_argument("numeric point ids only"));
                };
                let vector = dense(point.vectors)?;
                if vector.len() as u64 != collection.dimensions {
                    return Err(Status::invalid_argument(format!(
                        "Wrong input: Vector dimension error: expected dim: {}, got {}",
                        collection.dimensions,
                        vector.len()
                    )));
                }
                points.push((id, (vector, point.payload)));
            }
            // All or nothing, as one Qdrant update operation is.
            collection.points.extend(points);
            Ok(Response::new(done()))
        }

        async fn count(
            &self,
            request: Request<q::CountPoints>,
        ) -> Result<Response<q::CountResponse>, Status> {
            self.record("count");
            let request = request.into_inner();
            let collections = self.collections.lock().unwrap();
            let collection = collections
                .get(&request.collection_name)
                .ok_or_else(|| missing(&request.collection_name))?;
            let mut count = 0;
            for (_, payload) in collection.points.values() {
                count += u64::from(passes(request.filter.as_ref(), payload)?);
            }
            Ok(Response::new(q::CountResponse {
                result: Some(q::CountResult { count }),
                time: 0.0,
                usage: None,
            }))
        }

        async fn query(
            &self,
            request: Request<q::QueryPoints>,
        ) -> Result<Response<q::QueryResponse>, Status> {
            self.record("query");
            let request = request.into_inner();
            let Some(q::query::Variant::Nearest(q::VectorInput {
                variant: Some(q::vector_input::Variant::Dense(target)),
            })) = request
                .query
                .and_then(|query| query.variant)
            else {
                return Err(Status::unimplemented("only nearest to a dense vector"));
            };
            let collections = self.collections.lock().unwrap();
            let collection = collections
                .get(&request.collection_name)
                .ok_or_else(|| missing(&request.collection_name))?;
            if target.data.len() as u64 != collection.dimensions {
                return Err(Status::invalid_argument("query vector dimension"));
            }
            let mut scored = Vec::new();
            for (id, (vector, payload)) in &collection.points {
                if passes(request.filter.as_ref(), payload)? {
                    scored.push((*id, cosine(vector, &target.data), payload.clone()));
                }
            }
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            scored.truncate(request.limit.unwrap_or(10) as usize);
            let with_payload = request.with_payload.is_some();
            Ok(Response::new(q::QueryResponse {
                result: scored
                    .into_iter()
                    .map(|(id, score, payload)| q::ScoredPoint {
                        id: Some(id.into()),
                        payload: if with_payload { payload } else { HashMap::new() },
                        score,
                        ..q::ScoredPoint::default()
                    })
                    .collect(),
                time: 0.0,
                usage: None,
            }))
        }
    }
    unimplemented {
        delete(DeletePoints) -> PointsOperationResponse;
        get(GetPoints) -> GetResponse;
        update_vectors(UpdatePointVectors) -> PointsOperationResponse;
        delete_vectors(DeletePointVectors) -> PointsOperationResponse;
        set_payload(SetPayloadPoints) -> PointsOperationResponse;
        overwrite_payload(SetPayloadPoints) -> PointsOperationResponse;
        delete_payload(DeletePayloadPoints) -> PointsOperationResponse;
        clear_payload(ClearPayloadPoints) -> PointsOperationResponse;
        delete_field_index(DeleteFieldIndexCollection) -> PointsOperationResponse;
        create_vector_name(CreateVectorNameRequest) -> PointsOperationResponse;
        delete_vector_name(DeleteVectorNameRequest) -> PointsOperationResponse;
        search(SearchPoints) -> SearchResponse;
        search_batch(SearchBatchPoints) -> SearchBatchResponse;
        search_groups(SearchPointGroups) -> SearchGroupsResponse;
        scroll(ScrollPoints) -> ScrollResponse;
        recommend(RecommendPoints) -> RecommendResponse;
        recommend_batch(RecommendBatchPoints) -> RecommendBatchResponse;
        recommend_groups(RecommendPointGroups) -> RecommendGroupsResponse;
        discover(DiscoverPoints) -> DiscoverResponse;
        discover_batch(DiscoverBatchPoints) -> DiscoverBatchResponse;
        update_batch(UpdateBatchPoints) -> UpdateBatchResponse;
        query_batch(QueryBatchPoints) -> QueryBatchResponse;
        query_groups(QueryPointGroups) -> QueryGroupsResponse;
        facet(FacetCounts) -> FacetResponse;
        search_matrix_pairs(SearchMatrixPoints) -> SearchMatrixPairsResponse;
        search_matrix_offsets(SearchMatrixPoints) -> SearchMatrixOffsetsResponse;
    }
}

/// A running server; it stops when the test's runtime ends.
pub struct FakeQdrant {
    pub store: Store,
    pub address: SocketAddr,
}

impl FakeQdrant {
    pub async fn start() -> Self {
        let store = Store::default();
        let incoming =
            tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = incoming.local_addr().unwrap();
        let router = tonic::transport::Server::builder()
            .add_service(QdrantServer::new(store.clone()))
            .add_service(CollectionsServer::new(store.clone()))
            .add_service(PointsServer::new(store.clone()));
        tokio::spawn(router.serve_with_incoming(incoming));
        Self { store, address }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}
