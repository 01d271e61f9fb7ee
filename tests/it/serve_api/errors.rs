//! Bad requests get OpenAI-shaped errors that name the field.

use super::*;

#[tokio::test]
async fn bad_requests_get_openai_errors_naming_the_field() {
    let f = fixture(ServeConfig {
        max_body_bytes: 64 * 1024,
        ..ServeConfig::default()
    })
    .await;
    let with = |key: &str, value: Value| {
        let mut body = question("gym@letters");
        body[key] = value;
        body.to_string()
    };
    let cases: Vec<BadCase> = vec![
        ("".into(), &[], 400, "not a valid chat completion request"),
        ("not json".into(), &[], 400, "at line 1 column 2"),
        ("[]".into(), &[], 400, "expected struct ChatRequest"),
        ("{}".into(), &[], 400, "missing field `model`"),
        (
            json!({"model": "gym"}).to_string(),
            &[],
            400,
            "missing field `messages`",
        ),
        (
            with("messages", json!([])),
            &[],
            400,
            "`messages` must not be empty",
        ),
        (with("n", json!(0)), &[], 400, "`n` is 0"),
        (with("n", json!(99)), &[], 400, "`n` is 99"),
        (with("n", json!(-1)), &[], 400, "invalid value"),
        (
            with("temperature", json!(-1)),
            &[],
            400,
            "`temperature` is -1",
        ),
        (with("temperature", json!("hot")), &[], 400, "invalid type"),
        (with("top_p", json!(0)), &[], 400, "`top_p` is 0"),
        (
            with("max_tokens", json!(0)),
            &[],
            400,
            "`max_tokens` must be at least 1",
        ),
        (
            with("stop", json!(["a", "b", "c", "d", "e"])),
            &[],
            400,
            "`stop` takes",
        ),
        (
            with("top_logprobs", json!(50)),
            &[],
            400,
            "`top_logprobs` is 50",
        ),
        (
            with("response_format", json!({"type": "xml"})),
            &[],
            400,
            "`response_format.type` is `xml`",
        ),
        (
            with("messages", json!([{"role": "robot", "content": "hi"}])),
            &[],
            400,
            "messages[0].role is `robot`",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "image_url"}]}]),
            ),
            &[],
            400,
            "messages[0].content[0] is of type image_url",
        ),
        (with("model", json!("gpt-9")), &[], 404, "no model `gpt-9`"),
        (
            with("model", json!("gym@nosuch")),
            &[],
            404,
            "no library named `nosuch`",
        ),
        (
            with("model", json!("gym@letters:99")),
            &[],
            404,
            "has no version 99",
        ),
        (
            with("model", json!("gym@letters:x")),
            &[],
            400,
            "`x` is not a number",
        ),
        (
            question("gym").to_string(),
            &[("x-gym-library", "letters@two")],
            400,
            "`two` is not a number",
        ),
        (
            question("gym").to_string(),
            &[("x-gym-top-k", "many")],
            400,
            "x-gym-top-k must be a whole number",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "x".repeat(70_000)}]),
            ),
            &[],
            413,
            "over the limit of 65536 bytes",
        ),
        ("{".repeat(100_000), &[], 413, "over the limit"),
        ("[".repeat(20_000), &[], 400, "invalid type: sequence"),
        (
            format!(
                "{{\"model\":\"gym\",\"messages\":[{{\"role\":\"user\",\"content\":{}",
                "[".repeat(20_000)
            ),
            &[],
            400,
            "not a valid chat completion request",
        ),
    ];
    let before = f.server.requests();
    let mut wrong = Vec::new();
    for (body, headers, status, message) in cases {
        let mut request = Request::post("/v1/chat/completions");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Body::from(body.clone())).unwrap();
        let (got, _, bytes) = call(&f.state, request).await;
        let shown = &body[..body.len().min(80)];
        let error: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let text = error["error"]["message"].as_str().unwrap_or_default();
        if got.as_u16() != status
            || !text.contains(message)
            || error["error"]["type"] != "invalid_request_error"
        {
            wrong.push(format!(
                "{shown}: got {got} {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(
        f.server.requests(),
        before,
        "no bad request reached the model"
    );
    let (status, _, bytes) = call(
        &f.state,
        Request::get("/v2/nothing").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&bytes).contains("unknown_url"));
}
