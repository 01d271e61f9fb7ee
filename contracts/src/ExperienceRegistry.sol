// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// The part of KeeperToken the registry reads.
interface IVotesToken {
    function getPastVotes(address account, uint256 blockNumber) external view returns (uint256);
    function getPastTotalSupply(uint256 blockNumber) external view returns (uint256);
}

/// @title ExperienceRegistry
/// @notice Token-weighted governance of experience-library versions. Each
/// library (named by a `bytes32 libraryId`, e.g. keccak256 of its name) has an
/// accepted Merkle root and version. Anyone holding KEEPER proposes moving a
/// library from its accepted (root, version) to a new one; holders vote with
/// their KEEPER balance at the proposal's snapshot block; a proposal that
/// reaches the supermajority and the quorum is executed and becomes the
/// library's accepted root.
///
/// Rules (all checked on chain):
/// - Snapshot: weights and total supply are read at `snapshotBlock =
///   block.number - 1` of the creating transaction, so tokens received later
///   (even in the same block) carry no weight for that proposal.
/// - Proposer: must have non-zero weight at the snapshot.
/// - Base: `baseRoot`/`baseVersion` must equal the library's accepted root and
///   version (zero/zero before the first acceptance), both when proposing and
///   when executing, so a proposal overtaken by another cannot be executed.
///   `newVersion > baseVersion` and `newRoot` is non-zero and differs from
///   `baseRoot`.
/// - Voting: one vote per address per proposal, yes or no, while
///   `block.timestamp < deadline` (deadline = creation time + votingPeriod)
///   and the proposal is not executed; the weight is the snapshot balance and
///   must be non-zero.
/// - Quorum: basis points of the total supply at the snapshot, fixed per
///   proposal when it is created: `quorumVotes = ceil(supply * quorumBps /
///   10000)`. The owner may change `quorumBps` (0..10000) for later proposals.
/// - Accepted: `yes > 0 && yes * 100 >= 66 * (yes + no) && yes + no >= quorumVotes`.
/// - Execute (anyone): after the deadline if accepted; or before it once the
///   yes weight alone is decisive: `yes * 100 >= 66 * supplyAtSnapshot &&
///   yes >= quorumVotes` (no remaining vote can change the outcome).
contract ExperienceRegistry {
    /// Percent of the cast weight the yes side needs (inclusive).
    uint256 public constant SUPERMAJORITY_PERCENT = 66;
    uint16 public constant MAX_BPS = 10_000;

    enum ProposalState {
        /// Voting is open.
        Active,
        /// Voting is closed and the proposal did not pass.
        Defeated,
        /// Passed (or decisively passing) and executable now.
        Succeeded,
        /// Executed; its root was accepted.
        Executed,
        /// Would pass, but the library's accepted root moved on since it was proposed.
        Stale
    }

    struct Proposal {
        uint256 id;
        bytes32 libraryId;
        bytes32 baseRoot;
        bytes32 newRoot;
        uint64 baseVersion;
        uint64 newVersion;
        address author;
        uint64 deadline;
        uint256 snapshotBlock;
        uint256 snapshotSupply;
        uint256 quorumVotes;
        uint256 yesWeight;
        uint256 noWeight;
        bool executed;
    }

    struct Library {
        bytes32 root;
        uint64 version;
        /// The proposal that set `root` (0 before the first).
        uint256 proposalId;
    }

    IVotesToken public immutable token;
    address public owner;
    uint16 public quorumBps;
    uint64 public votingPeriod;
    uint256 public proposalCount;

    mapping(uint256 => Proposal) private _proposals;
    mapping(bytes32 => Library) private _libraries;
    mapping(uint256 => mapping(address => bool)) public hasVoted;

    event ProposalCreated(
        uint256 indexed id,
        bytes32 indexed libraryId,
        address indexed author,
        bytes32 baseRoot,
        bytes32 newRoot,
        uint64 baseVersion,
        uint64 newVersion,
        uint64 deadline
    );
    event VoteCast(uint256 indexed id, address indexed voter, bool support, uint256 weight);
    event ProposalExecuted(
        uint256 indexed id, bytes32 indexed libraryId, bytes32 oldRoot, bytes32 newRoot, uint64 newVersion
    );
    event QuorumChanged(uint16 oldBps, uint16 newBps);
    event VotingPeriodChanged(uint64 oldPeriod, uint64 newPeriod);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    /// The caller is not the owner.
    error NotOwner(address caller);
    /// `account` has no KEEPER at the proposal's snapshot block.
    error NotAVoter(address account);
    /// `account` already voted on proposal `id`.
    error AlreadyVoted(uint256 id, address account);
    /// Voting on `id` ended at `deadline` (or the proposal was executed).
    error VotingClosed(uint256 id, uint64 deadline);
    /// Voting on `id` is open until `deadline` and the outcome is not yet decided.
    error VotingOpen(uint256 id, uint64 deadline);
    /// Proposal `id` did not reach the supermajority or the quorum.
    error NotAccepted(uint256 id, uint256 yesWeight, uint256 noWeight, uint256 quorumVotes);
    /// Proposal `id` was already executed.
    error AlreadyExecuted(uint256 id);
    /// The proposal's base is not the library's accepted (root, version).
    error StaleBase(
        bytes32 libraryId, bytes32 acceptedRoot, uint64 acceptedVersion, bytes32 baseRoot, uint64 baseVersion
    );
    /// No proposal has id `id`.
    error UnknownProposal(uint256 id);
    /// `newVersion` must be greater than `baseVersion`.
    error InvalidVersion(uint64 baseVersion, uint64 newVersion);
    /// `newRoot` must be non-zero and differ from the base root.
    error InvalidRoot(bytes32 newRoot);
    /// Quorum basis points above 10000.
    error InvalidQuorum(uint16 bps);
    /// A voting period of zero.
    error InvalidVotingPeriod(uint64 period);
    /// The zero address as token or owner.
    error ZeroAddress();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    constructor(IVotesToken token_, uint16 quorumBps_, uint64 votingPeriod_) {
        if (address(token_) == address(0)) revert ZeroAddress();
        if (quorumBps_ > MAX_BPS) revert InvalidQuorum(quorumBps_);
        if (votingPeriod_ == 0) revert InvalidVotingPeriod(votingPeriod_);
        token = token_;
        owner = msg.sender;
        quorumBps = quorumBps_;
        votingPeriod = votingPeriod_;
        emit OwnershipTransferred(address(0), msg.sender);
        emit QuorumChanged(0, quorumBps_);
        emit VotingPeriodChanged(0, votingPeriod_);
    }

    // --------------------------------------------------------- proposals --

    /// Proposes moving `libraryId` from (baseRoot, baseVersion), which must be
    /// its accepted state, to (newRoot, newVersion). Returns the proposal id
    /// (ids start at 1).
    function propose(bytes32 libraryId, bytes32 baseRoot, uint64 baseVersion, bytes32 newRoot, uint64 newVersion)
        external
        returns (uint256 id)
    {
        _checkBase(libraryId, baseRoot, baseVersion);
        if (newVersion <= baseVersion) revert InvalidVersion(baseVersion, newVersion);
        if (newRoot == bytes32(0) || newRoot == baseRoot) revert InvalidRoot(newRoot);

        uint256 snapshot = block.number - 1;
        if (token.getPastVotes(msg.sender, snapshot) == 0) revert NotAVoter(msg.sender);
        uint256 supply = token.getPastTotalSupply(snapshot);

        id = ++proposalCount;
        uint64 deadline = uint64(block.timestamp) + votingPeriod;
        Proposal storage p = _proposals[id];
        p.id = id;
        p.libraryId = libraryId;
        p.baseRoot = baseRoot;
        p.newRoot = newRoot;
        p.baseVersion = baseVersion;
        p.newVersion = newVersion;
        p.author = msg.sender;
        p.deadline = deadline;
        p.snapshotBlock = snapshot;
        p.snapshotSupply = supply;
        p.quorumVotes = (supply * quorumBps + MAX_BPS - 1) / MAX_BPS;

        emit ProposalCreated(id, libraryId, msg.sender, baseRoot, newRoot, baseVersion, newVersion, deadline);
    }

    /// Casts the caller's snapshot weight for (`support`) or against proposal `id`.
    function vote(uint256 id, bool support) external returns (uint256 weight) {
        Proposal storage p = _get(id);
        if (p.executed || block.timestamp >= p.deadline) revert VotingClosed(id, p.deadline);
        if (hasVoted[id][msg.sender]) revert AlreadyVoted(id, msg.sender);
        weight = token.getPastVotes(msg.sender, p.snapshotBlock);
        if (weight == 0) revert NotAVoter(msg.sender);
        hasVoted[id][msg.sender] = true;
        if (support) {
            p.yesWeight += weight;
        } else {
            p.noWeight += weight;
        }
        emit VoteCast(id, msg.sender, support, weight);
    }

    /// Executes proposal `id`: its root becomes the library's accepted root.
    function execute(uint256 id) external {
        Proposal storage p = _get(id);
        if (p.executed) revert AlreadyExecuted(id);
        if (block.timestamp < p.deadline) {
            if (!_decided(p)) revert VotingOpen(id, p.deadline);
        } else if (!_accepted(p)) {
            revert NotAccepted(id, p.yesWeight, p.noWeight, p.quorumVotes);
        }
        _checkBase(p.libraryId, p.baseRoot, p.baseVersion);

        p.executed = true;
        Library storage lib = _libraries[p.libraryId];
        bytes32 oldRoot = lib.root;
        lib.root = p.newRoot;
        lib.version = p.newVersion;
        lib.proposalId = id;
        emit ProposalExecuted(id, p.libraryId, oldRoot, p.newRoot, p.newVersion);
    }

    // ------------------------------------------------------------- views --

    function acceptedRoot(bytes32 libraryId) external view returns (bytes32) {
        return _libraries[libraryId].root;
    }

    function acceptedVersion(bytes32 libraryId) external view returns (uint64) {
        return _libraries[libraryId].version;
    }

    /// (root, version, proposal id that set it); all zero before the first acceptance.
    function accepted(bytes32 libraryId) external view returns (bytes32 root, uint64 version, uint256 proposalId) {
        Library storage lib = _libraries[libraryId];
        return (lib.root, lib.version, lib.proposalId);
    }

    function getProposal(uint256 id) external view returns (Proposal memory) {
        return _get(id);
    }

    function state(uint256 id) external view returns (ProposalState) {
        Proposal storage p = _get(id);
        if (p.executed) return ProposalState.Executed;
        bool open = block.timestamp < p.deadline;
        bool passes = open ? _decided(p) : _accepted(p);
        if (!passes) return open ? ProposalState.Active : ProposalState.Defeated;
        Library storage lib = _libraries[p.libraryId];
        if (lib.root != p.baseRoot || lib.version != p.baseVersion) return ProposalState.Stale;
        return ProposalState.Succeeded;
    }

    // ------------------------------------------------------------- owner --

    function setQuorumBps(uint16 newBps) external onlyOwner {
        if (newBps > MAX_BPS) revert InvalidQuorum(newBps);
        emit QuorumChanged(quorumBps, newBps);
        quorumBps = newBps;
    }

    function setVotingPeriod(uint64 newPeriod) external onlyOwner {
        if (newPeriod == 0) revert InvalidVotingPeriod(newPeriod);
        emit VotingPeriodChanged(votingPeriod, newPeriod);
        votingPeriod = newPeriod;
    }

    function transferOwnership(address newOwner) external onlyOwner {
        if (newOwner == address(0)) revert ZeroAddress();
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    // ---------------------------------------------------------- internal --

    function _get(uint256 id) private view returns (Proposal storage p) {
        p = _proposals[id];
        if (p.id == 0) revert UnknownProposal(id);
    }

    function _checkBase(bytes32 libraryId, bytes32 baseRoot, uint64 baseVersion) private view {
        Library storage lib = _libraries[libraryId];
        if (lib.root != baseRoot || lib.version != baseVersion) {
            revert StaleBase(libraryId, lib.root, lib.version, baseRoot, baseVersion);
        }
    }

    /// The final-tally rule: supermajority of the cast weight, and quorum.
    function _accepted(Proposal storage p) private view returns (bool) {
        uint256 yes = p.yesWeight;
        uint256 cast = yes + p.noWeight;
        return yes > 0 && yes * 100 >= SUPERMAJORITY_PERCENT * cast && cast >= p.quorumVotes;
    }

    /// Passing no matter how the remaining weight votes.
    function _decided(Proposal storage p) private view returns (bool) {
        uint256 yes = p.yesWeight;
        return yes > 0 && yes * 100 >= SUPERMAJORITY_PERCENT * p.snapshotSupply && yes >= p.quorumVotes;
    }
}
