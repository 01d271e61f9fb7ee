//! The model's tokenizer, rebuilt from the GGUF metadata: GPT-2 byte-level BPE with the
//! pre-tokenizer llama.cpp calls `smollm` (digits one by one, then the GPT-2 split), and the
//! ChatML template SmolLM2 uses. Special tokens (`<|im_start|>`, `<|im_end|>`) never go through
//! BPE: the template places their ids directly.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{PreTokenizerWrapper, Tokenizer};

use crate::backend::ChatMessage;

/// Why a tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF tokenizer metadata: {0}")]
    Metadata(String),
    #[error("tokenizer: {0}")]
    Tokenize(String),
}

/// Byte-level BPE plus the chat template.
pub struct ChatTokenizer {
    inner: Tokenizer,
    im_start: u32,
    im_end: u32,
    /// Tokens that end a turn.
    pub eos: Vec<u32>,
}

fn strings(metadata: &HashMap<String, Value>, key: &str) -> Result<Vec<String>, TokenizerError> {
    let values = metadata
        .get(key)
        .and_then(|v| v.to_vec().ok())
        .ok_or_else(|| TokenizerError::Metadata(format!("`{key}` is missing")))?;
    values
        .iter()
        .map(|v| {
            v.to_string()
                .cloned()
                .map_err(|_| TokenizerError::Metadata(format!("`{key}` holds a non-string")))
        })
        .collect()
}

impl ChatTokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` metadata.
    pub fn from_gguf(metadata: &HashMap<String, Value>) -> Result<Self, TokenizerError> {
        let model = metadata
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if model != "gpt2" {
            return Err(TokenizerError::Metadata(format!(
                "tokenizer model `{model}` is not supported (only gpt2 byte-level BPE)"
            )));
        }
        let tokens = strings(metadata, "tokenizer.ggml.tokens")?;
        let merges = strings(metadata, "tokenizer.ggml.merges")?;
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.clone(), id as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| TokenizerError::Metadata(format!("bad merge `{m}`")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| TokenizerError::Metadata(e.to_string()))?;
        let mut inner = Tokenizer::new(bpe);
        let pre = Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, true)),
        ]);
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let id = |text: &str| {
            tokens
                .iter()
                .position(|t| t == text)
                .map(|i| i as u32)
                .ok_or_else(|| TokenizerError::Metadata(format!("no `{text}` token")))
        };
        let im_start = id("<|im_start|>")?;
        let im_end = id("<|im_end|>")?;
        let mut eos = vec![im_end];
        if let Some(e) = metadata
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok())
            && !eos.contains(&e)
        {
            eos.push(e);
        }
        if let Ok(e) = id("<|endoftext|>")
            && !eos.contains(&e)
        {
            eos.push(e);
        }
        Ok(Self {
            inner,
            im_start,
            im_end,
            eos,
        })
    }

    /// Plain text to tokens (no special tokens).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Tokenize(e.to_string()))
    }

    /// Tokens back to text.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Tokenize(e.to_string()))
    }

    /// The ChatML prompt of `messages`, ending with the opening of the assistant's turn.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        if messages
            .first()
            .is_none_or(|m| m.role != crate::backend::Role::System)
        {
            self.turn(
                &mut ids,
                "system",
                "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
            )?;
        }
        for message in messages {
            self.turn(&mut ids, message.role.as_str(), &message.content)?;
        }
        ids.push(self.im_start);
        ids.extend(self.encode("assistant\n")?);
        Ok(ids)
    }

    /// The tokens of an assistant answer as training targets: the text, then the end of turn.
    pub fn answer(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = self.encode(text)?;
        ids.push(self.im_end);
        Ok(ids)
    }

    fn turn(&self, ids: &mut Vec<u32>, role: &str, content: &str) -> Result<(), TokenizerError> {
        ids.push(self.im_start);
        ids.extend(self.encode(&format!("{role}\n{content}"))?);
        ids.push(self.im_end);
        ids.extend(self.encode("\n")?);
        Ok(())
    }
}
