//! The procedure-doc index: list, search and read docs (Viewer), save a new version or remove a
//! doc (Operator). A doc is markdown that holds a proven procedure minus its dataset.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use cairn_core::access::Caller;
use cairn_core::docs::{DocRef, parse_version};
use cairn_engine::EngineError;
use cairn_engine::docs::DocQuery;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{Doc, DocList, DocSaved, DocSearchResult, DocSummary, SaveDoc};

/// `POST /docs` takes a doc of up to 1 MiB of text, which JSON escaping can make larger.
pub const DOCS_BODY_LIMIT: usize = 4 << 20;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Removed docs too (default false).
    pub removed: Option<bool>,
}

/// The docs by name, each with its newest version's summary.
#[utoipa::path(get, path = "/docs", tag = "docs", params(ListQuery),
    responses((status = 200, body = DocList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_docs(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<DocList>, ApiError> {
    let removed = q.removed.unwrap_or(false);
    blocking(move || Ok(Json(DocList::from_records(&state.service.engine().docs(removed)?)))).await
}

/// Saves a new version of a doc (201), or answers 200 with `created: false` when its newest
/// version already holds this text from the same verification. Bad input changes nothing.
#[utoipa::path(post, path = "/docs", tag = "docs", request_body = SaveDoc,
    responses((status = 201, description = "A new version", body = DocSaved),
        (status = 200, description = "Unchanged: the newest version holds this text", body = DocSaved),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "No such verification", body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn save_doc(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<SaveDoc>,
) -> Result<(StatusCode, Json<DocSaved>), ApiError> {
    blocking(move || {
        let saved = DocSaved::from_saved(&state.service.engine().save_doc(&caller, &body.into_request())?);
        Ok((if saved.created { StatusCode::CREATED } else { StatusCode::OK }, Json(saved)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// SQLite FTS5 syntax: words (all must match), "a phrase", OR, NOT, prefix*; quote a word
    /// with punctuation, e.g. "k-means".
    #[param(min_length = 1, max_length = 1024)]
    pub query: Option<String>,
    /// The same as `query`.
    #[param(min_length = 1, max_length = 1024)]
    pub q: Option<String>,
    /// At most this many results, best first (default 10).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
}

/// Full-text search over the newest version of every live doc, BM25-ranked, with snippets.
#[utoipa::path(get, path = "/docs/search", tag = "docs", params(SearchQuery),
    responses((status = 200, body = DocSearchResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, description = "No query, or one that is not FTS5 syntax", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn search_docs(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<DocSearchResult>, ApiError> {
    let query = match (q.query, q.q) {
        (Some(a), Some(b)) if a != b => {
            return Err(EngineError::invalid_field("query", "give the query once: `query` and `q` differ").into());
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => {
            return Err(EngineError::invalid_field("query", "query is required: GET /docs/search?query=WORDS").into());
        }
    };
    blocking(move || {
        let found = state.service.engine().search_docs(&DocQuery { query, limit: q.limit })?;
        Ok(Json(DocSearchResult::from_search(&found)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DocQueryParams {
    /// A version number (default: the newest; a removed doc is read by version only).
    #[param(value_type = Option<u32>, minimum = 1)]
    pub version: Option<String>,
    /// `html`: also render the text as HTML (`html`; raw HTML in the markdown is escaped).
    #[param(value_type = Option<String>, pattern = "^html$")]
    pub render: Option<String>,
}

/// One version of a doc with its text, every version, and the verification it came from.
#[utoipa::path(get, path = "/docs/{name}", tag = "docs", params(("name" = String, Path), DocQueryParams),
    responses((status = 200, body = Doc), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "No such doc or version, or a removed doc read without a version", body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_doc(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<DocQueryParams>,
) -> Result<Json<Doc>, ApiError> {
    let html = match q.render.as_deref() {
        None => false,
        Some("html") => true,
        Some(other) => {
            return Err(EngineError::invalid_field(
                "render",
                format!("render `{other}` is not known; the one rendering is `html`"),
            )
            .into());
        }
    };
    blocking(move || {
        let r = DocRef::parse(&name).map_err(EngineError::from)?;
        let version = match (r.version, q.version.as_deref().map(parse_version).transpose().map_err(EngineError::from)?)
        {
            (Some(a), Some(b)) if a != b => {
                return Err(EngineError::invalid_field(
                    "version",
                    format!("the path names version {a} and ?version= {b}; give it once"),
                )
                .into());
            }
            (a, b) => a.or(b),
        };
        let mut doc = Doc::from_view(&state.service.engine().read_doc(r.name.as_str(), version)?);
        if html {
            doc.html = Some(crate::markdown::to_html(&doc.text));
        }
        Ok(Json(doc))
    })
    .await
}

/// Removes a doc: a tombstone (it leaves the list and the search; its versions stay readable by
/// number). Removing a removed doc changes nothing.
#[utoipa::path(delete, path = "/docs/{name}", tag = "docs", params(("name" = String, Path)),
    responses((status = 200, description = "The doc, with `removed_at`", body = DocSummary),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn remove_doc(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<DocSummary>, ApiError> {
    blocking(move || Ok(Json(DocSummary::from_record(&state.service.engine().remove_doc(&caller, &name)?)))).await
}
